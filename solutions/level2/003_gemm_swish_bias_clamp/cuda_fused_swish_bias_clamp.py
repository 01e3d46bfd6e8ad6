# Keeps the GEMM (+ its bias) in cuBLAS via F.linear with the module's own weights, then fuses the whole
# epilogue -- swish (x * sigmoid(x)), + bias vector, clamp -- into ONE vectorized (float4), in-place CUDA
# kernel. Eager PyTorch runs four separate kernels (sigmoid, mul, add, clamp), each reading and writing the
# 8192x8192 activation (256 MB); the fused kernel reads and writes it once, saving ~3/4 of the epilogue traffic.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor swish_bias_clamp_(torch::Tensor y, torch::Tensor bias, double lo, double hi);"

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>

__device__ __forceinline__ float epi(float v, float b, float lo, float hi) {
    float s = 1.0f / (1.0f + expf(-v));
    float r = v * s;
    r = r + b;
    return fminf(fmaxf(r, lo), hi);
}

__global__ void swish_bias_clamp_vec4(float* __restrict__ y, const float* __restrict__ bias,
                                      long long n4, int cols4, float lo, float hi) {
    float4* y4 = reinterpret_cast<float4*>(y);
    const float4* b4 = reinterpret_cast<const float4*>(bias);
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 v = y4[i];
        float4 b = __ldg(&b4[i % cols4]);
        v.x = epi(v.x, b.x, lo, hi);
        v.y = epi(v.y, b.y, lo, hi);
        v.z = epi(v.z, b.z, lo, hi);
        v.w = epi(v.w, b.w, lo, hi);
        y4[i] = v;
    }
}

__global__ void swish_bias_clamp_scalar(float* __restrict__ y, const float* __restrict__ bias,
                                        long long n, int cols, float lo, float hi) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = epi(y[i], __ldg(&bias[i % cols]), lo, hi);
    }
}

torch::Tensor swish_bias_clamp_(torch::Tensor y, torch::Tensor bias, double lo, double hi) {
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
        swish_bias_clamp_vec4<<<(unsigned)blocks, threads, 0, stream>>>(
            y.data_ptr<float>(), bias.data_ptr<float>(), n4, cols / 4, (float)lo, (float)hi);
    } else {
        long long blocks = (n + threads - 1) / threads;
        if (blocks > (1LL << 22)) blocks = 1LL << 22;
        swish_bias_clamp_scalar<<<(unsigned)blocks, threads, 0, stream>>>(
            y.data_ptr<float>(), bias.data_ptr<float>(), n, cols, (float)lo, (float)hi);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(name="kb_l2_003_swish_bias_clamp", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["swish_bias_clamp_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, clamp_min, clamp_max):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.1)
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x):
        y = F.linear(x.contiguous(), self.linear.weight, self.linear.bias)  # cuBLAS GEMM, fresh output
        return _ext.swish_bias_clamp_(y, self.bias.contiguous(), float(self.clamp_min), float(self.clamp_max))
