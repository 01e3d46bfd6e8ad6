# Keeps the convolution in cuDNN (F.conv2d with the module's own weight and bias), then fuses the min over the
# channel dimension and both tanh's into ONE CUDA kernel: each thread owns four adjacent pixels of one image
# and walks the channels with float4 loads (a warp reads 512 contiguous bytes per channel), keeping the running
# min in registers, then writes tanh(tanh(min)). Eager PyTorch runs a strided reduction over the 128x64x126x126
# activation (520 MB) and two more kernels over the 8 MB result; here the activation is read once, and the
# tanh's cost no extra launches or round trips.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor channel_min_tanh2(torch::Tensor y);"

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>

__device__ __forceinline__ float fin(float m) { return tanhf(tanhf(m)); }

// VEC: item i covers pixels 4*(i % HW4) .. +3 of image i / HW4; otherwise one pixel per item. Grid-stride.
template <bool VEC>
__global__ void channel_min_tanh2_kernel(const float* __restrict__ y, float* __restrict__ out, long long N, int C,
                                         long long HW) {
    const long long per_img = VEC ? (HW >> 2) : HW;
    const long long items = N * per_img;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < items; i += stride) {
        const long long n = i / per_img, q = i % per_img;
        if (VEC) {
            const float4* src = reinterpret_cast<const float4*>(y + (size_t)n * C * HW) + q;
            float4 m = __ldg(src);
#pragma unroll 8
            for (int c = 1; c < C; ++c) {
                const float4 v = __ldg(src + (size_t)c * (HW >> 2));
                m.x = fminf(m.x, v.x); m.y = fminf(m.y, v.y); m.z = fminf(m.z, v.z); m.w = fminf(m.w, v.w);
            }
            float4 o;
            o.x = fin(m.x); o.y = fin(m.y); o.z = fin(m.z); o.w = fin(m.w);
            reinterpret_cast<float4*>(out + (size_t)n * HW)[q] = o;
        } else {
            const float* src = y + (size_t)n * C * HW + q;
            float m = __ldg(src);
#pragma unroll 8
            for (int c = 1; c < C; ++c) m = fminf(m, __ldg(src + (size_t)c * HW));
            out[(size_t)n * HW + q] = fin(m);
        }
    }
}

torch::Tensor channel_min_tanh2(torch::Tensor y) {
    TORCH_CHECK(y.is_cuda(), "y must be a CUDA tensor");
    TORCH_CHECK(y.is_contiguous(), "y must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32, "y must be float32");
    TORCH_CHECK(y.dim() == 4, "y must be (N, C, H, W)");
    const long long N = y.size(0), C = y.size(1), H = y.size(2), W = y.size(3);
    TORCH_CHECK(C >= 1, "min over an empty channel dimension");
    auto out = torch::empty({N, 1, H, W}, y.options());
    const long long HW = H * W;
    if (N * HW == 0) return out;
    const bool vec = (HW % 4 == 0) && (reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0);
    const long long items = vec ? N * (HW / 4) : N * HW;
    const int threads = 256;
    long long blocks = (items + threads - 1) / threads;
    blocks = std::max(1LL, std::min(blocks, 1LL << 20));
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (vec)
        channel_min_tanh2_kernel<true><<<(unsigned)blocks, threads, 0, stream>>>(y.data_ptr<float>(), out.data_ptr<float>(), N, (int)C, HW);
    else
        channel_min_tanh2_kernel<false><<<(unsigned)blocks, threads, 0, stream>>>(y.data_ptr<float>(), out.data_ptr<float>(), N, (int)C, HW);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(name="kb_l2_025_channel_min_tanh2_c2", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["channel_min_tanh2"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        c = self.conv
        y = F.conv2d(x.contiguous(), c.weight, c.bias, c.stride, c.padding, c.dilation, c.groups)  # cuDNN, fresh
        return _ext.channel_min_tanh2(y.contiguous())
