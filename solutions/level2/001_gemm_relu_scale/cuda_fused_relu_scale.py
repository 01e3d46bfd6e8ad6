# Keeps the GEMM (+ its bias) in cuBLAS via F.linear with the module's own weights, then fuses ReLU and the
# scalar multiply into ONE vectorized (float4), in-place CUDA kernel over the GEMM's fresh output. Eager PyTorch
# runs two elementwise kernels (relu, mul), each reading and writing the 8192x8192 activation (256 MB) and
# allocating a new one; the fused kernel reads and writes it once, halving the epilogue's memory traffic.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor relu_scale_(torch::Tensor y, double scale);"

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>

__device__ __forceinline__ float epi(float v, float s) {
    // torch.relu then x * scale, both in fp32
    return fmaxf(v, 0.0f) * s;
}

// float4 body over the first n4 groups of four, then a scalar tail; grid-stride loops.
__global__ void relu_scale_kernel(float* __restrict__ y, long long n, long long n4, float s) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    float4* y4 = reinterpret_cast<float4*>(y);
    for (long long i = tid; i < n4; i += stride) {
        float4 v = y4[i];
        v.x = epi(v.x, s); v.y = epi(v.y, s); v.z = epi(v.z, s); v.w = epi(v.w, s);
        y4[i] = v;
    }
    for (long long i = 4 * n4 + tid; i < n; i += stride) y[i] = epi(y[i], s);
}

torch::Tensor relu_scale_(torch::Tensor y, double scale) {
    TORCH_CHECK(y.is_cuda(), "y must be a CUDA tensor");
    TORCH_CHECK(y.is_contiguous(), "y must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32, "y must be float32");
    const long long n = y.numel();
    if (n == 0) return y;
    float* p = y.data_ptr<float>();
    const long long n4 = (reinterpret_cast<uintptr_t>(p) % 16 == 0) ? n / 4 : 0;
    const int threads = 256;
    long long work = n4 + (n - 4 * n4);
    long long blocks = (work + threads - 1) / threads;
    if (blocks > (1LL << 20)) blocks = 1LL << 20;
    if (blocks < 1) blocks = 1;
    relu_scale_kernel<<<(unsigned)blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(p, n, n4, (float)scale);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(name="kb_l2_001_relu_scale_c2", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["relu_scale_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        y = F.linear(x.contiguous(), self.linear.weight, self.linear.bias)  # cuBLAS GEMM, fresh output
        return _ext.relu_scale_(y.contiguous(), float(self.scaling_factor))
