# Keeps the GEMM (+ its bias) in cuBLAS via F.linear with the module's own weights, then applies both Mish
# activations in ONE vectorized (float4), in-place CUDA kernel over the GEMM's fresh output. Eager PyTorch runs
# two Mish kernels, each reading and writing the 8192x4096 activation (128 MB) and allocating a new tensor; the
# fused kernel reads and writes it once (half the epilogue traffic) and keeps the intermediate in registers.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor mish_mish_(torch::Tensor y);"

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>

// PyTorch's CUDA mish: x * tanh(log1p(exp(x))) in fp32 (no softplus threshold)
__device__ __forceinline__ float mish(float x) { return x * tanhf(log1pf(expf(x))); }
__device__ __forceinline__ float epi(float v) { return mish(mish(v)); }

__global__ void mish_mish_kernel(float* __restrict__ y, long long n, long long n4) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    float4* y4 = reinterpret_cast<float4*>(y);
    for (long long i = tid; i < n4; i += stride) {
        float4 v = y4[i];
        v.x = epi(v.x); v.y = epi(v.y); v.z = epi(v.z); v.w = epi(v.w);
        y4[i] = v;
    }
    for (long long i = 4 * n4 + tid; i < n; i += stride) y[i] = epi(y[i]);
}

torch::Tensor mish_mish_(torch::Tensor y) {
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
    mish_mish_kernel<<<(unsigned)blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(p, n, n4);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(name="kb_l2_007_mish_mish_c2", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["mish_mish_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = F.linear(x.contiguous(), self.linear.weight, self.linear.bias)  # cuBLAS GEMM, fresh output
        return _ext.mish_mish_(y.contiguous())
