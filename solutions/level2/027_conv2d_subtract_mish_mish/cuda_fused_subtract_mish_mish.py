# Keeps the convolution in cuDNN (F.conv2d with the module's own weight and bias), then fuses
# "- subtract_value -> Mish -> Mish" into ONE vectorized (float4), in-place grid-stride kernel over the conv
# output. Eager PyTorch runs three kernels that each read and write the 529 MB activation; fused it is read
# and written once (3x less epilogue traffic).
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor subtract_mish_mish_(torch::Tensor y, double sub);"

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>

__device__ __forceinline__ float mishf(float v) {
    return v * tanhf(log1pf(expf(v)));  // same formula as PyTorch's mish kernel
}

__device__ __forceinline__ float chain(float v, float sub) {
    return mishf(mishf(v - sub));
}

__global__ void subtract_mish_mish_vec4(float* __restrict__ y, long long n4, float sub) {
    float4* y4 = reinterpret_cast<float4*>(y);
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 v = y4[i];
        v.x = chain(v.x, sub);
        v.y = chain(v.y, sub);
        v.z = chain(v.z, sub);
        v.w = chain(v.w, sub);
        y4[i] = v;
    }
}

__global__ void subtract_mish_mish_scalar(float* __restrict__ y, long long start, long long n, float sub) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = start + (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = chain(y[i], sub);
}

torch::Tensor subtract_mish_mish_(torch::Tensor y, double sub) {
    TORCH_CHECK(y.is_cuda(), "input must be a CUDA tensor");
    TORCH_CHECK(y.is_contiguous(), "input must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32, "input must be float32");
    const long long n = y.numel();
    if (n == 0) return y;
    const int threads = 256;
    auto stream = c10::cuda::getCurrentCUDAStream();
    long long done = 0;
    if (reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0) {
        const long long n4 = n / 4;
        if (n4 > 0) {
            long long blocks = (n4 + threads - 1) / threads;
            if (blocks > (1LL << 22)) blocks = 1LL << 22;
            subtract_mish_mish_vec4<<<(unsigned)blocks, threads, 0, stream>>>(y.data_ptr<float>(), n4, (float)sub);
            C10_CUDA_KERNEL_LAUNCH_CHECK();
        }
        done = n4 * 4;
    }
    if (done < n) {  // tail (or unaligned storage)
        const long long rem = n - done;
        long long blocks = (rem + threads - 1) / threads;
        if (blocks > (1LL << 22)) blocks = 1LL << 22;
        subtract_mish_mish_scalar<<<(unsigned)blocks, threads, 0, stream>>>(y.data_ptr<float>(), done, n, (float)sub);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return y;
}
"""

_ext = load_inline(name="kb_l2_027_conv2d_subtract_mish_mish", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["subtract_mish_mish_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, subtract_value):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.subtract_value = subtract_value

    def forward(self, x):
        c = self.conv
        y = F.conv2d(x.contiguous(), c.weight, c.bias, c.stride, c.padding, c.dilation, c.groups)  # cuDNN
        return _ext.subtract_mish_mish_(y.contiguous(), float(self.subtract_value))
