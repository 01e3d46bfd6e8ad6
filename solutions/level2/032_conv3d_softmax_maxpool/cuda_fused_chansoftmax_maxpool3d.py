"""Conv3d in cuDNN, then softmax over channels and MaxPool3d in ONE CUDA kernel (a thread per pooled voxel).

Expected win: eager's softmax reads and writes the 16x16x30x126x126 conv output (467 MiB each way) and MaxPool3d
reads it again; the fused kernel reads it once (its second and third channel sweeps hit L1/L2) and writes only the
pooled eighth, saving ~0.9 GiB of HBM traffic and two launches after an unchanged convolution.
"""
# For each pooled voxel (n, od, oh, ow) and each of the k^3 window positions p: m_p = max over channels,
# s_p = sum over channels of expf(x - m_p) (fp32, channel order); then for each channel c the output is
# max over p of expf(x[c, p] - m_p) / s_p -- PyTorch's softmax epilogue (exp(x - max) / sum), then MaxPool3d's max.
# Window: kernel k, stride s (nn.MaxPool3d(k): s = k), no padding, floor mode.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = ("torch::Tensor chan_softmax_maxpool3d(torch::Tensor y, int64_t kd, int64_t kh, int64_t kw, "
           "int64_t sd, int64_t sh, int64_t sw);")

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>
#include <algorithm>

// Dynamic shared memory: per thread and window position, the position's channel max and 1/(channel sum) are
// kept as (max, sum) pairs at [p * blockDim + tid] (conflict-free).
__global__ void __launch_bounds__(128) chan_softmax_maxpool3d_kernel(
        const float* __restrict__ y, float* __restrict__ out, int64_t total, int C, int D, int H, int W,
        int PD, int PH, int PW, int kd, int kh, int kw, int sd, int sh, int sw) {
    extern __shared__ float2 stats[];
    const int K = kd * kh * kw;
    const int64_t DHW = (int64_t)D * H * W;
    const int64_t PDHW = (int64_t)PD * PH * PW;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < total; o += (int64_t)gridDim.x * blockDim.x) {
        const int64_t n = o / PDHW;
        int64_t r = o - n * PDHW;
        const int od = (int)(r / ((int64_t)PH * PW));
        r -= (int64_t)od * PH * PW;
        const int oh = (int)(r / PW), ow = (int)(r - (int64_t)oh * PW);
        const float* base = y + (size_t)n * C * DHW + ((size_t)od * sd * H + (size_t)oh * sh) * W + (size_t)ow * sw;
        // pass 1 + 2 per window position: channel max, then the sum of exp(x - max)
        for (int p = 0; p < K; ++p) {
            const int a = p / (kh * kw), b = (p / kw) % kh, c2 = p % kw;
            const float* q = base + ((size_t)a * H + b) * W + c2;
            float m = -INFINITY;
            for (int c = 0; c < C; ++c) m = fmaxf(m, __ldg(q + (size_t)c * DHW));
            float s = 0.0f;
            for (int c = 0; c < C; ++c) s += expf(__ldg(q + (size_t)c * DHW) - m);
            stats[(size_t)p * blockDim.x + threadIdx.x] = make_float2(m, s);
        }
        // pass 3: per channel, the max over the window of the softmax value
        float* op = out + (size_t)n * C * PDHW + (size_t)(o - n * PDHW);
        for (int c = 0; c < C; ++c) {
            float best = -INFINITY;
            for (int p = 0; p < K; ++p) {
                const int a = p / (kh * kw), b = (p / kw) % kh, c2 = p % kw;
                const float2 ms = stats[(size_t)p * blockDim.x + threadIdx.x];
                const float v = expf(__ldg(base + (size_t)c * DHW + ((size_t)a * H + b) * W + c2) - ms.x) / ms.y;
                best = (v > best || isnan(v)) ? v : best;     // MaxPool3d's comparison
            }
            op[(size_t)c * PDHW] = best;
        }
    }
}

torch::Tensor chan_softmax_maxpool3d(torch::Tensor y, int64_t kd, int64_t kh, int64_t kw,
                                     int64_t sd, int64_t sh, int64_t sw) {
    TORCH_CHECK(y.is_cuda(), "y must be a CUDA tensor");
    TORCH_CHECK(y.is_contiguous(), "y must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32, "y must be float32");
    TORCH_CHECK(y.dim() == 5, "y must be NCDHW");
    TORCH_CHECK(kd > 0 && kh > 0 && kw > 0 && sd > 0 && sh > 0 && sw > 0, "bad pooling window");
    const int64_t N = y.size(0), C = y.size(1), D = y.size(2), H = y.size(3), W = y.size(4);
    TORCH_CHECK(D >= kd && H >= kh && W >= kw, "input smaller than the pooling window");
    const int64_t PD = (D - kd) / sd + 1, PH = (H - kh) / sh + 1, PW = (W - kw) / sw + 1;
    auto out = torch::empty({N, C, PD, PH, PW}, y.options());
    const int64_t total = N * PD * PH * PW;
    if (total == 0 || C == 0) return out;
    const int threads = 128;
    const size_t smem = (size_t)kd * kh * kw * threads * sizeof(float2);
    TORCH_CHECK(smem <= 48 * 1024, "pooling window too large for the fused kernel");
    const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, 1LL << 30);
    auto stream = c10::cuda::getCurrentCUDAStream();
    chan_softmax_maxpool3d_kernel<<<(unsigned)blocks, threads, smem, stream>>>(
        y.data_ptr<float>(), out.data_ptr<float>(), total, (int)C, (int)D, (int)H, (int)W, (int)PD, (int)PH, (int)PW,
        (int)kd, (int)kh, (int)kw, (int)sd, (int)sh, (int)sw);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(name="kb_l2_032_chan_softmax_maxpool3d_c3", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["chan_softmax_maxpool3d"], extra_cuda_cflags=["-O3"], verbose=False)


def _triple(v):
    return (v, v, v) if isinstance(v, int) else tuple(v)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, pool_kernel_size):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.pool = nn.MaxPool3d(pool_kernel_size)

    def forward(self, x):
        p = self.pool
        k = _triple(p.kernel_size)
        s = _triple(p.stride if p.stride is not None else p.kernel_size)
        if _triple(p.padding) != (0, 0, 0) or _triple(p.dilation) != (1, 1, 1) or p.ceil_mode:
            raise NotImplementedError("fused kernel covers MaxPool3d without padding/dilation/ceil_mode")
        y = self.conv(x).contiguous()   # cuDNN
        return _ext.chan_softmax_maxpool3d(y, k[0], k[1], k[2], s[0], s[1], s[2])
