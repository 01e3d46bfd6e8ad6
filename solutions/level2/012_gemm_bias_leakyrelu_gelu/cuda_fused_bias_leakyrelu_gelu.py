# Keeps the GEMM (+ its own bias) in cuBLAS via F.linear with the module's weights, then fuses the epilogue --
# + extra bias vector, LeakyReLU, exact (erf) GELU -- into ONE vectorized (float4), in-place CUDA kernel.
# Eager PyTorch launches three kernels that each read and write the 8192x8192 activation (256 MB); the fused
# kernel does a single read and write, removing ~2/3 of the epilogue memory traffic.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor bias_leaky_gelu_(torch::Tensor y, torch::Tensor bias, double negative_slope);"

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>

__device__ __forceinline__ float epi(float v, float b, float ns) {
    v = v + b;
    v = v > 0.0f ? v : v * ns;
    return v * 0.5f * (1.0f + erff(v * 0.70710678118654752440f));
}

__global__ void bias_leaky_gelu_vec4(float* __restrict__ y, const float* __restrict__ bias,
                                     long long n4, int cols4, float ns) {
    float4* y4 = reinterpret_cast<float4*>(y);
    const float4* b4 = reinterpret_cast<const float4*>(bias);
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 v = y4[i];
        float4 b = __ldg(&b4[i % cols4]);
        v.x = epi(v.x, b.x, ns);
        v.y = epi(v.y, b.y, ns);
        v.z = epi(v.z, b.z, ns);
        v.w = epi(v.w, b.w, ns);
        y4[i] = v;
    }
}

__global__ void bias_leaky_gelu_scalar(float* __restrict__ y, const float* __restrict__ bias,
                                       long long n, int cols, float ns) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = epi(y[i], __ldg(&bias[i % cols]), ns);
}

torch::Tensor bias_leaky_gelu_(torch::Tensor y, torch::Tensor bias, double negative_slope) {
    TORCH_CHECK(y.is_cuda() && bias.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(y.is_contiguous() && bias.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32 && bias.scalar_type() == torch::kFloat32, "inputs must be float32");
    TORCH_CHECK(y.dim() == 2 && bias.dim() == 1 && bias.size(0) == y.size(1), "shape mismatch");
    const long long n = y.numel();
    const int cols = (int)y.size(1);
    if (n == 0) return y;
    const int threads = 256;
    auto stream = c10::cuda::getCurrentCUDAStream();
    bool vec = (cols % 4 == 0) && (reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0) &&
               (reinterpret_cast<uintptr_t>(bias.data_ptr<float>()) % 16 == 0);
    if (vec) {
        long long n4 = n / 4;
        long long blocks = (n4 + threads - 1) / threads;
        if (blocks > (1LL << 22)) blocks = 1LL << 22;
        bias_leaky_gelu_vec4<<<(unsigned)blocks, threads, 0, stream>>>(
            y.data_ptr<float>(), bias.data_ptr<float>(), n4, cols / 4, (float)negative_slope);
    } else {
        long long blocks = (n + threads - 1) / threads;
        if (blocks > (1LL << 22)) blocks = 1LL << 22;
        bias_leaky_gelu_scalar<<<(unsigned)blocks, threads, 0, stream>>>(
            y.data_ptr<float>(), bias.data_ptr<float>(), n, cols, (float)negative_slope);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(name="kb_l2_012_bias_leakyrelu_gelu", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["bias_leaky_gelu_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, negative_slope):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.1)
        self.negative_slope = negative_slope

    def forward(self, x):
        y = F.linear(x.contiguous(), self.linear.weight, self.linear.bias)  # cuBLAS GEMM, fresh output
        return _ext.bias_leaky_gelu_(y, self.bias.contiguous(), float(self.negative_slope))
