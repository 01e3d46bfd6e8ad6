# Keeps the 3-D convolution in cuDNN (F.conv3d with the module's own weight and bias), then fuses
# ReLU -> LeakyReLU -> GELU (erf) -> sigmoid -> + per-channel bias into ONE vectorized (float4), in-place
# kernel over the conv output. The grid walks (n, c) planes so the channel's bias is loaded once per plane.
# Eager PyTorch launches five kernels, each reading and writing the 715 MB activation; fused it is read and
# written once (about 5x less epilogue traffic).
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor act_chain_bias_(torch::Tensor y, torch::Tensor bias);"

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>

__device__ __forceinline__ float chain(float v, float b) {
    v = fmaxf(v, 0.0f);                                         // ReLU
    v = v > 0.0f ? v : v * 0.01f;                               // LeakyReLU(0.01)
    v = v * 0.5f * (1.0f + erff(v * 0.70710678118654752440f));  // GELU (exact)
    v = 1.0f / (1.0f + expf(-v));                               // sigmoid
    return v + b;                                               // + bias[c]
}

template <bool VEC>
__global__ void act_chain_bias_kernel(float* __restrict__ y, const float* __restrict__ bias,
                                      long long planes, int C, long long S) {
    for (long long p = blockIdx.y; p < planes; p += gridDim.y) {
        const float b = __ldg(&bias[p % C]);
        float* dst = y + (size_t)p * S;
        const long long stride = (long long)gridDim.x * blockDim.x;
        if (VEC) {
            float4* d4 = reinterpret_cast<float4*>(dst);
            const long long S4 = S >> 2;
            for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < S4; j += stride) {
                float4 v = d4[j];
                v.x = chain(v.x, b);
                v.y = chain(v.y, b);
                v.z = chain(v.z, b);
                v.w = chain(v.w, b);
                d4[j] = v;
            }
        } else {
            for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < S; j += stride)
                dst[j] = chain(dst[j], b);
        }
    }
}

torch::Tensor act_chain_bias_(torch::Tensor y, torch::Tensor bias) {
    TORCH_CHECK(y.is_cuda() && bias.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(y.is_contiguous() && bias.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32 && bias.scalar_type() == torch::kFloat32, "inputs must be float32");
    TORCH_CHECK(y.dim() >= 2, "input must be (N, C, ...)");
    const long long N = y.size(0), C = y.size(1);
    TORCH_CHECK(bias.numel() == C, "bias must have one value per channel");
    if (y.numel() == 0) return y;
    const long long planes = N * C;
    const long long S = y.numel() / planes;
    const bool vec = (S % 4 == 0) && (reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0);
    const int threads = 256;
    const long long work = vec ? S / 4 : S;
    long long bx = (work + threads * 4 - 1) / (threads * 4);  // ~4 items per thread
    if (bx < 1) bx = 1;
    if (bx > 65535) bx = 65535;
    dim3 grid((unsigned)bx, (unsigned)std::min<long long>(planes, 65535));
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (vec)
        act_chain_bias_kernel<true><<<grid, threads, 0, stream>>>(y.data_ptr<float>(), bias.data_ptr<float>(), planes, (int)C, S);
    else
        act_chain_bias_kernel<false><<<grid, threads, 0, stream>>>(y.data_ptr<float>(), bias.data_ptr<float>(), planes, (int)C, S);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(name="kb_l2_031_conv3d_act_chain_bias", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["act_chain_bias_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        c = self.conv
        y = F.conv3d(x.contiguous(), c.weight, c.bias, c.stride, c.padding, c.dilation, c.groups)  # cuDNN
        return _ext.act_chain_bias_(y.contiguous(), self.bias.reshape(-1).contiguous())
