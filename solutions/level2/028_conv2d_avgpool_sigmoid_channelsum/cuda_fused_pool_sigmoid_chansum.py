# Keeps the convolution in cuDNN (F.conv2d with the module's own weight and bias), then fuses AvgPool2d,
# sigmoid and the sum over channels into ONE CUDA kernel: each thread owns one pooled output pixel of one image,
# walks the channels reading its 2x2 window (two float2 loads; a warp reads 256 contiguous bytes per input row),
# averages, applies the sigmoid and accumulates the channel sum in registers, writing one value per pixel.
# Eager PyTorch reads the 128x64x128x128 conv output (537 MB) in the pool, writes the 134 MB pooled tensor, then
# reads and writes it again for the sigmoid and reads it once more for the sum; here only the 537 MB read and a
# 2 MB write remain.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor pool_sigmoid_chansum(torch::Tensor y, int64_t kh, int64_t kw, int64_t sh, int64_t sw);"

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>

__device__ __forceinline__ float sigmoid(float a) { return 1.0f / (1.0f + expf(-a)); }  // PyTorch's CUDA sigmoid

// One item per output pixel (n, oh, ow), grid-stride. AvgPool2d without padding: the window sum starts at 0 and
// adds rows then columns in order, then divides by kh * kw, as PyTorch's avg_pool2d kernel does.
// K2: kh = kw = sh = sw = 2 with W even and y 8-byte aligned: the window is two float2 loads.
template <bool K2>
__global__ void pool_sigmoid_chansum_kernel(const float* __restrict__ y, float* __restrict__ out, long long N, int C,
                                            int H, int W, int OH, int OW, int kh, int kw, int sh, int sw) {
    const long long items = N * OH * OW;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long HW = (long long)H * W;
    const float div = (float)(kh * kw);
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < items; i += stride) {
        const int ow = (int)(i % OW);
        const long long t = i / OW;
        const int oh = (int)(t % OH);
        const long long n = t / OH;
        const float* base = y + (size_t)n * C * HW + (size_t)(oh * sh) * W + (size_t)ow * sw;
        float acc = 0.0f;
        if (K2) {
#pragma unroll 4
            for (int c = 0; c < C; ++c) {
                const float* p = base + (size_t)c * HW;
                const float2 r0 = __ldg(reinterpret_cast<const float2*>(p));
                const float2 r1 = __ldg(reinterpret_cast<const float2*>(p + W));
                float s = 0.0f;
                s = s + r0.x; s = s + r0.y; s = s + r1.x; s = s + r1.y;
                acc += sigmoid(s / div);
            }
        } else {
            for (int c = 0; c < C; ++c) {
                const float* p = base + (size_t)c * HW;
                float s = 0.0f;
                for (int a = 0; a < kh; ++a)
                    for (int b = 0; b < kw; ++b) s = s + __ldg(&p[(size_t)a * W + b]);
                acc += sigmoid(s / div);
            }
        }
        out[i] = acc;  // out is (N, 1, OH, OW): item i is its flat index
    }
}

torch::Tensor pool_sigmoid_chansum(torch::Tensor y, int64_t kh, int64_t kw, int64_t sh, int64_t sw) {
    TORCH_CHECK(y.is_cuda(), "y must be a CUDA tensor");
    TORCH_CHECK(y.is_contiguous(), "y must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32, "y must be float32");
    TORCH_CHECK(y.dim() == 4, "y must be (N, C, H, W)");
    TORCH_CHECK(kh >= 1 && kw >= 1 && sh >= 1 && sw >= 1, "bad pooling parameters");
    const long long N = y.size(0), C = y.size(1), H = y.size(2), W = y.size(3);
    TORCH_CHECK(H >= kh && W >= kw, "input smaller than the pooling window");
    const long long OH = (H - kh) / sh + 1, OW = (W - kw) / sw + 1;
    auto out = torch::empty({N, 1, OH, OW}, y.options());
    const long long items = N * OH * OW;
    if (items == 0) return out;
    const bool k2 = kh == 2 && kw == 2 && sh == 2 && sw == 2 && (W % 2 == 0) &&
                    (reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 8 == 0);
    const int threads = 256;
    long long blocks = (items + threads - 1) / threads;
    blocks = std::max(1LL, std::min(blocks, 1LL << 20));
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (k2)
        pool_sigmoid_chansum_kernel<true><<<(unsigned)blocks, threads, 0, stream>>>(
            y.data_ptr<float>(), out.data_ptr<float>(), N, (int)C, (int)H, (int)W, (int)OH, (int)OW, 2, 2, 2, 2);
    else
        pool_sigmoid_chansum_kernel<false><<<(unsigned)blocks, threads, 0, stream>>>(
            y.data_ptr<float>(), out.data_ptr<float>(), N, (int)C, (int)H, (int)W, (int)OH, (int)OW, (int)kh, (int)kw,
            (int)sh, (int)sw);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(name="kb_l2_028_pool_sigmoid_chansum_c2", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["pool_sigmoid_chansum"], extra_cuda_cflags=["-O3"], verbose=False)


def _pair(v):
    return (int(v[0]), int(v[1])) if isinstance(v, (tuple, list)) else (int(v), int(v))


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, pool_kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.avg_pool = nn.AvgPool2d(pool_kernel_size)

    def forward(self, x):
        c = self.conv
        y = F.conv2d(x.contiguous(), c.weight, c.bias, c.stride, c.padding, c.dilation, c.groups)  # cuDNN, fresh
        p = self.avg_pool
        if _pair(p.padding) != (0, 0) or p.ceil_mode or p.divisor_override is not None:
            raise NotImplementedError("fused kernel covers AvgPool2d without padding, floor mode, default divisor")
        (kh, kw), (sh, sw) = _pair(p.kernel_size), _pair(p.stride if p.stride is not None else p.kernel_size)
        return _ext.pool_sigmoid_chansum(y.contiguous(), kh, kw, sh, sw)
