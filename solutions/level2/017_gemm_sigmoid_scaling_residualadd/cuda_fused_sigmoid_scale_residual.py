# Keeps the GEMM (+ bias) in cuBLAS via F.linear with the module's own weights, then computes
# out = sigmoid(y) * scale + y in ONE vectorized (float4), in-place CUDA kernel. Eager PyTorch runs sigmoid,
# mul and add as three kernels over the 16384x8192 activation (512 MB), the add reading two tensors: about
# 7 x 512 MB of traffic versus 2 x 512 MB fused.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor sigmoid_scale_residual_(torch::Tensor y, double scale);"

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>

__device__ __forceinline__ float epi(float v, float sc) {
    float s = 1.0f / (1.0f + expf(-v));
    return s * sc + v;
}

__global__ void sigmoid_scale_residual_vec4(float* __restrict__ y, long long n4, float sc) {
    float4* y4 = reinterpret_cast<float4*>(y);
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 v = y4[i];
        v.x = epi(v.x, sc);
        v.y = epi(v.y, sc);
        v.z = epi(v.z, sc);
        v.w = epi(v.w, sc);
        y4[i] = v;
    }
}

__global__ void sigmoid_scale_residual_scalar(float* __restrict__ y, long long start, long long n, float sc) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = start + (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = epi(y[i], sc);
}

torch::Tensor sigmoid_scale_residual_(torch::Tensor y, double scale) {
    TORCH_CHECK(y.is_cuda(), "input must be a CUDA tensor");
    TORCH_CHECK(y.is_contiguous(), "input must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32, "input must be float32");
    const long long n = y.numel();
    if (n == 0) return y;
    const int threads = 256;
    auto stream = c10::cuda::getCurrentCUDAStream();
    long long done = 0;
    if (reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0) {
        long long n4 = n / 4;
        if (n4 > 0) {
            long long blocks = (n4 + threads - 1) / threads;
            if (blocks > (1LL << 22)) blocks = 1LL << 22;
            sigmoid_scale_residual_vec4<<<(unsigned)blocks, threads, 0, stream>>>(y.data_ptr<float>(), n4, (float)scale);
            C10_CUDA_KERNEL_LAUNCH_CHECK();
        }
        done = n4 * 4;
    }
    if (done < n) {  // tail (or unaligned storage)
        long long rem = n - done;
        long long blocks = (rem + threads - 1) / threads;
        if (blocks > (1LL << 22)) blocks = 1LL << 22;
        sigmoid_scale_residual_scalar<<<(unsigned)blocks, threads, 0, stream>>>(y.data_ptr<float>(), done, n, (float)scale);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return y;
}
"""

_ext = load_inline(name="kb_l2_017_sigmoid_scale_residual", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["sigmoid_scale_residual_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        y = F.linear(x.contiguous(), self.linear.weight, self.linear.bias)  # cuBLAS GEMM, fresh output
        return _ext.sigmoid_scale_residual_(y, float(self.scaling_factor))
