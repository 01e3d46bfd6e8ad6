# Keeps the convolution in cuDNN (F.conv2d with the module's own weight and bias), then applies ReLU and the
# per-channel bias add in ONE vectorized (float4), in-place CUDA kernel over the conv's fresh output. Eager
# PyTorch runs two elementwise kernels (relu, broadcast add), each reading and writing the 32x64x254x254
# activation (528 MB); the fused kernel reads and writes it once, halving the epilogue's memory traffic. The grid
# walks (n, c) planes, so the channel (and its bias) is fixed per plane: no per-element index division.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor relu_bias_(torch::Tensor y, torch::Tensor bias);"

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>

__device__ __forceinline__ float epi(float v, float b) { return fmaxf(v, 0.0f) + b; }

// grid.y walks the N*C planes (grid-stride), grid.x/threads walk one plane of HW values.
template <bool VEC>
__global__ void relu_bias_kernel(float* __restrict__ y, const float* __restrict__ bias, long long planes, int C,
                                 long long HW) {
    for (long long p = blockIdx.y; p < planes; p += gridDim.y) {
        const float b = __ldg(&bias[p % C]);
        float* dst = y + (size_t)p * HW;
        const long long step = (long long)gridDim.x * blockDim.x;
        if (VEC) {
            float4* d4 = reinterpret_cast<float4*>(dst);
            const long long HW4 = HW >> 2;
            for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < HW4; j += step) {
                float4 v = d4[j];
                v.x = epi(v.x, b); v.y = epi(v.y, b); v.z = epi(v.z, b); v.w = epi(v.w, b);
                d4[j] = v;
            }
        } else {
            for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < HW; j += step)
                dst[j] = epi(dst[j], b);
        }
    }
}

torch::Tensor relu_bias_(torch::Tensor y, torch::Tensor bias) {
    TORCH_CHECK(y.is_cuda() && bias.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(y.is_contiguous() && bias.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32 && bias.scalar_type() == torch::kFloat32, "inputs must be float32");
    TORCH_CHECK(y.dim() >= 2, "y must be (N, C, ...)");
    const long long N = y.size(0), C = y.size(1);
    TORCH_CHECK(bias.numel() == C, "bias must have one value per channel");
    if (y.numel() == 0) return y;
    const long long planes = N * C;
    const long long HW = y.numel() / planes;
    const bool vec = (HW % 4 == 0) && (reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0);
    const int threads = 256;
    const long long work = vec ? HW / 4 : HW;
    long long bx = (work + threads * 4 - 1) / (threads * 4);  // ~4 items per thread
    bx = std::max(1LL, std::min(bx, 65535LL));
    const unsigned by = (unsigned)std::min(planes, 65535LL);
    dim3 grid((unsigned)bx, by);
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (vec)
        relu_bias_kernel<true><<<grid, threads, 0, stream>>>(y.data_ptr<float>(), bias.data_ptr<float>(), planes, (int)C, HW);
    else
        relu_bias_kernel<false><<<grid, threads, 0, stream>>>(y.data_ptr<float>(), bias.data_ptr<float>(), planes, (int)C, HW);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(name="kb_l2_020_relu_bias_c2", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["relu_bias_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        c = self.conv
        y = F.conv2d(x.contiguous(), c.weight, c.bias, c.stride, c.padding, c.dilation, c.groups)  # cuDNN, fresh
        return _ext.relu_bias_(y.contiguous(), self.bias.contiguous().view(-1))
