"""ConvTranspose2d in cuDNN, then MaxPool2d -> hardtanh -> spatial mean -> tanh in ONE CUDA kernel (a block per plane).

Expected win: eager writes the pooled map (128 MiB), runs hardtanh over it (read + write), reads it again for the
mean and then runs tanh; the fused kernel reads the 512 MiB conv output once and writes N*C floats, removing ~0.5 GiB
of HBM traffic and three launches after an unchanged transposed convolution.
"""
# Per (n, c) plane: every pooling window (kernel kh x kw, stride sh x sw, no padding, floor mode, as nn.MaxPool2d
# here) gives m = max of the window, clamped to [lo, hi]; the plane's clamped maxima are summed in fp32 (per-thread
# partial sums, then a warp/block tree), divided by their count and passed through tanhf.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = ("torch::Tensor pool_clamp_mean_tanh(torch::Tensor y, int64_t kh, int64_t kw, int64_t sh, int64_t sw, "
           "double lo, double hi);")

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cfloat>
#include <cstdint>

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

// One block per (n, c) plane of y (H x W). Thread t walks pooled positions t, t + blockDim, ...
// KH/KW > 0: compile-time window (2x2 with stride 2 is the common case); 0: runtime kh, kw.
template <int KH, int KW>
__global__ void __launch_bounds__(256) pool_clamp_mean_tanh_kernel(
        const float* __restrict__ y, float* __restrict__ out, int H, int W, int PH, int PW,
        int kh_rt, int kw_rt, int sh, int sw, float lo, float hi) {
    const int kh = KH > 0 ? KH : kh_rt;
    const int kw = KW > 0 ? KW : kw_rt;
    const float* p = y + (size_t)blockIdx.x * (size_t)H * (size_t)W;
    const int P = PH * PW;
    float s = 0.0f;
    for (int i = threadIdx.x; i < P; i += blockDim.x) {
        const int ph = i / PW, pw = i - ph * PW;
        const float* w0 = p + (size_t)(ph * sh) * W + (size_t)pw * sw;
        float m = -INFINITY;
        for (int a = 0; a < kh; ++a) {
            const float* row = w0 + (size_t)a * W;
            #pragma unroll 4
            for (int b = 0; b < kw; ++b) {
                const float v = __ldg(row + b);
                m = (v > m || isnan(v)) ? v : m;          // MaxPool2d's comparison (NaN propagates)
            }
        }
        m = fminf(fmaxf(m, lo), hi);                        // F.hardtanh
        s += m;
    }
    __shared__ float red[32];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    s = warp_sum(s);
    if (lane == 0) red[wid] = s;
    __syncthreads();
    if (wid == 0) {
        const int nw = (blockDim.x + 31) >> 5;
        s = lane < nw ? red[lane] : 0.0f;
        s = warp_sum(s);
        if (lane == 0) out[blockIdx.x] = tanhf(s / (float)P);   // mean over (H', W'), then tanh
    }
}

torch::Tensor pool_clamp_mean_tanh(torch::Tensor y, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                                   double lo, double hi) {
    TORCH_CHECK(y.is_cuda(), "y must be a CUDA tensor");
    TORCH_CHECK(y.is_contiguous(), "y must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32, "y must be float32");
    TORCH_CHECK(y.dim() == 4, "y must be NCHW");
    TORCH_CHECK(kh > 0 && kw > 0 && sh > 0 && sw > 0, "bad pooling window");
    const int64_t N = y.size(0), C = y.size(1), H = y.size(2), W = y.size(3);
    TORCH_CHECK(H >= kh && W >= kw, "input smaller than the pooling window");
    const int64_t PH = (H - kh) / sh + 1, PW = (W - kw) / sw + 1;
    TORCH_CHECK(N * C < (1LL << 31) && PH * PW < (1LL << 31), "too large");
    auto out = torch::empty({N, C, 1, 1}, y.options());
    if (N * C == 0) return out;
    auto stream = c10::cuda::getCurrentCUDAStream();
    const dim3 grid((unsigned)(N * C));
    if (kh == 2 && kw == 2)
        pool_clamp_mean_tanh_kernel<2, 2><<<grid, 256, 0, stream>>>(y.data_ptr<float>(), out.data_ptr<float>(),
            (int)H, (int)W, (int)PH, (int)PW, 2, 2, (int)sh, (int)sw, (float)lo, (float)hi);
    else
        pool_clamp_mean_tanh_kernel<0, 0><<<grid, 256, 0, stream>>>(y.data_ptr<float>(), out.data_ptr<float>(),
            (int)H, (int)W, (int)PH, (int)PW, (int)kh, (int)kw, (int)sh, (int)sw, (float)lo, (float)hi);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(name="kb_l2_039_pool_clamp_mean_tanh_c3", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["pool_clamp_mean_tanh"], extra_cuda_cflags=["-O3"], verbose=False)


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, maxpool_kernel_size,
                 hardtanh_min, hardtanh_max):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding)
        self.maxpool = nn.MaxPool2d(kernel_size=maxpool_kernel_size)
        self.hardtanh_min = hardtanh_min
        self.hardtanh_max = hardtanh_max

    def forward(self, x):
        mp = self.maxpool
        kh, kw = _pair(mp.kernel_size)
        sh, sw = _pair(mp.stride if mp.stride is not None else mp.kernel_size)
        if _pair(mp.padding) != (0, 0) or _pair(mp.dilation) != (1, 1) or mp.ceil_mode:
            raise NotImplementedError("fused kernel covers MaxPool2d without padding/dilation/ceil_mode")
        y = self.conv_transpose(x).contiguous()   # cuDNN
        return _ext.pool_clamp_mean_tanh(y, kh, kw, sh, sw, float(self.hardtanh_min), float(self.hardtanh_max))
