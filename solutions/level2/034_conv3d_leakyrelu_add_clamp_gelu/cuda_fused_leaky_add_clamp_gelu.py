# Keeps the 3-D convolution in cuDNN (F.conv3d with the module's own weight and bias), then applies
# LeakyReLU(0.2) -> + per-channel tensor -> clamp[-1, 1] -> exact (erf) GELU in ONE vectorized (float4),
# in-place CUDA kernel over the conv's fresh output. Eager PyTorch runs four elementwise kernels, each reading
# and writing the 16x32x14x126x126 activation (455 MB); the fused kernel reads and writes it once, a quarter of
# the epilogue's traffic. The grid walks (n, c) planes, so the channel's addend is fixed per plane.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor leaky_add_clamp_gelu_(torch::Tensor y, torch::Tensor addend, double slope, double lo, double hi);"

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>

__device__ __forceinline__ float epi(float v, float a, float slope, float lo, float hi) {
    v = v > 0.0f ? v : v * slope;          // F.leaky_relu
    v = v + a;                             // + sum_tensor (per channel)
    v = fminf(fmaxf(v, lo), hi);           // torch.clamp
    return v * 0.5f * (1.0f + erff(v * 0.70710678118654752440f));  // F.gelu (erf form), PyTorch's order
}

template <bool VEC>
__global__ void leaky_add_clamp_gelu_kernel(float* __restrict__ y, const float* __restrict__ addend, long long planes,
                                            int C, long long HW, float slope, float lo, float hi) {
    for (long long p = blockIdx.y; p < planes; p += gridDim.y) {
        const float a = __ldg(&addend[p % C]);
        float* dst = y + (size_t)p * HW;
        const long long step = (long long)gridDim.x * blockDim.x;
        if (VEC) {
            float4* d4 = reinterpret_cast<float4*>(dst);
            const long long HW4 = HW >> 2;
            for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < HW4; j += step) {
                float4 v = d4[j];
                v.x = epi(v.x, a, slope, lo, hi); v.y = epi(v.y, a, slope, lo, hi);
                v.z = epi(v.z, a, slope, lo, hi); v.w = epi(v.w, a, slope, lo, hi);
                d4[j] = v;
            }
        } else {
            for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < HW; j += step)
                dst[j] = epi(dst[j], a, slope, lo, hi);
        }
    }
}

torch::Tensor leaky_add_clamp_gelu_(torch::Tensor y, torch::Tensor addend, double slope, double lo, double hi) {
    TORCH_CHECK(y.is_cuda() && addend.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(y.is_contiguous() && addend.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32 && addend.scalar_type() == torch::kFloat32, "inputs must be float32");
    TORCH_CHECK(y.dim() >= 2, "y must be (N, C, ...)");
    const long long N = y.size(0), C = y.size(1);
    TORCH_CHECK(addend.numel() == C, "sum_tensor must have one value per channel");
    if (y.numel() == 0) return y;
    const long long planes = N * C;
    const long long HW = y.numel() / planes;
    const bool vec = (HW % 4 == 0) && (reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0);
    const int threads = 256;
    const long long work = vec ? HW / 4 : HW;
    long long bx = (work + threads * 4 - 1) / (threads * 4);
    bx = std::max(1LL, std::min(bx, 65535LL));
    const unsigned by = (unsigned)std::min(planes, 65535LL);
    dim3 grid((unsigned)bx, by);
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (vec)
        leaky_add_clamp_gelu_kernel<true><<<grid, threads, 0, stream>>>(
            y.data_ptr<float>(), addend.data_ptr<float>(), planes, (int)C, HW, (float)slope, (float)lo, (float)hi);
    else
        leaky_add_clamp_gelu_kernel<false><<<grid, threads, 0, stream>>>(
            y.data_ptr<float>(), addend.data_ptr<float>(), planes, (int)C, HW, (float)slope, (float)lo, (float)hi);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(name="kb_l2_034_leaky_add_clamp_gelu_c2", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["leaky_add_clamp_gelu_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, sum_tensor_shape):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.sum_tensor = nn.Parameter(torch.randn(sum_tensor_shape) * 0.5)

    def forward(self, x):
        c = self.conv
        y = F.conv3d(x.contiguous(), c.weight, c.bias, c.stride, c.padding, c.dilation, c.groups)  # cuDNN, fresh
        # the reference's constants: leaky_relu slope 0.2, clamp to [-1, 1]
        return _ext.leaky_add_clamp_gelu_(y.contiguous(), self.sum_tensor.contiguous().view(-1), 0.2, -1.0, 1.0)
