# Keeps the 3-D transposed convolution in cuDNN (F.conv_transpose3d with the module's own weight and bias), then
# fuses "+ add_input" and "x * hardswish(x)" into ONE vectorized (float4) kernel writing in place over the conv
# output. Eager PyTorch runs add (reads 2, writes 1), hardswish (reads 1, writes 1) and mul (reads 2, writes 1)
# over the 604 MB tensors -- 8 tensor passes; fused it is 3 (read conv output, read add_input, write).
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor add_hardswish_(torch::Tensor y, torch::Tensor a);"

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>

__device__ __forceinline__ float f(float y, float a) {
    float v = y + a;
    float hs = v * fminf(fmaxf(v + 3.0f, 0.0f), 6.0f) / 6.0f;
    return v * hs;
}

__global__ void add_hardswish_vec4(float* __restrict__ y, const float* __restrict__ a, long long n4) {
    float4* y4 = reinterpret_cast<float4*>(y);
    const float4* a4 = reinterpret_cast<const float4*>(a);
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 v = y4[i];
        float4 w = a4[i];
        v.x = f(v.x, w.x);
        v.y = f(v.y, w.y);
        v.z = f(v.z, w.z);
        v.w = f(v.w, w.w);
        y4[i] = v;
    }
}

__global__ void add_hardswish_scalar(float* __restrict__ y, const float* __restrict__ a, long long start, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = start + (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = f(y[i], a[i]);
}

torch::Tensor add_hardswish_(torch::Tensor y, torch::Tensor a) {
    TORCH_CHECK(y.is_cuda() && a.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(y.is_contiguous() && a.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32 && a.scalar_type() == torch::kFloat32, "inputs must be float32");
    TORCH_CHECK(y.sizes() == a.sizes(), "add_input must have the conv output's shape");
    const long long n = y.numel();
    if (n == 0) return y;
    const int threads = 256;
    auto stream = c10::cuda::getCurrentCUDAStream();
    long long done = 0;
    if (reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0 &&
        reinterpret_cast<uintptr_t>(a.data_ptr<float>()) % 16 == 0) {
        const long long n4 = n / 4;
        if (n4 > 0) {
            long long blocks = (n4 + threads - 1) / threads;
            if (blocks > (1LL << 22)) blocks = 1LL << 22;
            add_hardswish_vec4<<<(unsigned)blocks, threads, 0, stream>>>(y.data_ptr<float>(), a.data_ptr<float>(), n4);
            C10_CUDA_KERNEL_LAUNCH_CHECK();
        }
        done = n4 * 4;
    }
    if (done < n) {  // tail (or unaligned storage)
        const long long rem = n - done;
        long long blocks = (rem + threads - 1) / threads;
        if (blocks > (1LL << 22)) blocks = 1LL << 22;
        add_hardswish_scalar<<<(unsigned)blocks, threads, 0, stream>>>(y.data_ptr<float>(), a.data_ptr<float>(), done, n);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return y;
}
"""

_ext = load_inline(name="kb_l2_037_convt3d_add_hardswish", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["add_hardswish_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding, output_padding=output_padding)

    def forward(self, x, add_input):
        ct = self.conv_transpose
        y = F.conv_transpose3d(x.contiguous(), ct.weight, ct.bias, ct.stride, ct.padding, ct.output_padding,
                               ct.groups, ct.dilation)  # cuDNN, fresh output
        return _ext.add_hardswish_(y.contiguous(), add_input.contiguous())
