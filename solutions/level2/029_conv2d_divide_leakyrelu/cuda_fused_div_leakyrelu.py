# Keeps the convolution in cuDNN (F.conv2d with the module's own weight and bias), then applies the scalar
# division and LeakyReLU(0.01) in ONE vectorized (float4), in-place CUDA kernel over the conv's fresh output.
# Eager PyTorch runs two elementwise kernels (div, leaky_relu), each reading and writing the 64x64x128x128
# activation (268 MB) and allocating a new one; the fused kernel reads and writes it once.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor div_leaky_(torch::Tensor y, double divisor, double slope);"

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>

// PyTorch divides a tensor by a CPU scalar as a multiply by its fp32 reciprocal (BinaryDivTrueKernel), then
// leaky_relu: x > 0 ? x : x * slope
__device__ __forceinline__ float epi(float v, float inv, float slope) {
    v = v * inv;
    return v > 0.0f ? v : v * slope;
}

__global__ void div_leaky_kernel(float* __restrict__ y, long long n, long long n4, float inv, float slope) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    float4* y4 = reinterpret_cast<float4*>(y);
    for (long long i = tid; i < n4; i += stride) {
        float4 v = y4[i];
        v.x = epi(v.x, inv, slope); v.y = epi(v.y, inv, slope); v.z = epi(v.z, inv, slope); v.w = epi(v.w, inv, slope);
        y4[i] = v;
    }
    for (long long i = 4 * n4 + tid; i < n; i += stride) y[i] = epi(y[i], inv, slope);
}

torch::Tensor div_leaky_(torch::Tensor y, double divisor, double slope) {
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
    const float inv = 1.0f / (float)divisor;
    div_leaky_kernel<<<(unsigned)blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(p, n, n4, inv, (float)slope);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(name="kb_l2_029_div_leaky_c2", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["div_leaky_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, divisor):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=1)
        self.divisor = divisor

    def forward(self, x):
        c = self.conv
        y = F.conv2d(x.contiguous(), c.weight, c.bias, c.stride, c.padding, c.dilation, c.groups)  # cuDNN, fresh
        return _ext.div_leaky_(y.contiguous(), float(self.divisor), 0.01)  # the reference's slope is 0.01
