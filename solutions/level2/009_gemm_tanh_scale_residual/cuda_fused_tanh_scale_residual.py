# Keeps the GEMM (+ its bias) in cuBLAS via F.linear with the module's own weights, then computes
# x + scale * tanh(y) in ONE vectorized (float4) CUDA kernel written in place over the GEMM's fresh output y
# (the input x is only read). Eager PyTorch runs three elementwise kernels (tanh, mul, add) over the 16384x2048
# activation (128 MB), reading about 4 and writing 3 such tensors; the fused kernel reads 2 and writes 1.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor tanh_scale_residual_(torch::Tensor y, torch::Tensor x, double scale);"

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>

// reference order: t = tanh(y); t = t * scale; x + t
__device__ __forceinline__ float epi(float yv, float xv, float s) { return xv + tanhf(yv) * s; }

__global__ void tanh_scale_residual_kernel(float* __restrict__ y, const float* __restrict__ x, long long n,
                                           long long n4, float s) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    float4* y4 = reinterpret_cast<float4*>(y);
    const float4* x4 = reinterpret_cast<const float4*>(x);
    for (long long i = tid; i < n4; i += stride) {
        float4 v = y4[i];
        const float4 r = __ldg(&x4[i]);
        v.x = epi(v.x, r.x, s); v.y = epi(v.y, r.y, s); v.z = epi(v.z, r.z, s); v.w = epi(v.w, r.w, s);
        y4[i] = v;
    }
    for (long long i = 4 * n4 + tid; i < n; i += stride) y[i] = epi(y[i], __ldg(&x[i]), s);
}

torch::Tensor tanh_scale_residual_(torch::Tensor y, torch::Tensor x, double scale) {
    TORCH_CHECK(y.is_cuda() && x.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(y.is_contiguous() && x.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32 && x.scalar_type() == torch::kFloat32, "inputs must be float32");
    TORCH_CHECK(y.sizes() == x.sizes(), "y and x must have the same shape (square Linear)");
    TORCH_CHECK(y.data_ptr<float>() != x.data_ptr<float>(), "y must not alias x");
    const long long n = y.numel();
    if (n == 0) return y;
    float* py = y.data_ptr<float>();
    const float* px = x.data_ptr<float>();
    const bool vec = (reinterpret_cast<uintptr_t>(py) % 16 == 0) && (reinterpret_cast<uintptr_t>(px) % 16 == 0);
    const long long n4 = vec ? n / 4 : 0;
    const int threads = 256;
    long long work = n4 + (n - 4 * n4);
    long long blocks = (work + threads - 1) / threads;
    if (blocks > (1LL << 20)) blocks = 1LL << 20;
    if (blocks < 1) blocks = 1;
    tanh_scale_residual_kernel<<<(unsigned)blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        py, px, n, n4, (float)scale);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(name="kb_l2_009_tanh_scale_residual_c2", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["tanh_scale_residual_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, features, scaling_factor):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = x.contiguous()
        y = F.linear(x, self.linear.weight, self.linear.bias)  # cuBLAS GEMM, fresh output
        return _ext.tanh_scale_residual_(y.contiguous(), x, float(self.scaling_factor))
