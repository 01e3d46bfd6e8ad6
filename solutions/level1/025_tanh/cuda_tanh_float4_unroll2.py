"""Tanh as one streaming CUDA kernel: two float4 loads in flight per thread, streaming (evict-first) hints, scalar tail.

Expected win: parity to a few % over eager (eager torch.tanh is one vectorized elementwise kernel at ~90% of HBM
bandwidth); the op is HBM-bound (2.5 GiB in, 2.5 GiB out), this kernel issues both 16-byte loads of a thread before
any store and marks the stream evict-first, so at best it closes the last few % to the bandwidth roofline.
"""
# Arithmetic as in PyTorch's tanh kernel: tanhf (the accurate libdevice tanh, not tanh.approx), fp32.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>

__device__ __forceinline__ float act_fn(float x, float /*unused*/) {
    return tanhf(x);
}

__device__ __forceinline__ float4 act4(float4 v, float alpha) {
    v.x = act_fn(v.x, alpha); v.y = act_fn(v.y, alpha); v.z = act_fn(v.z, alpha); v.w = act_fn(v.w, alpha);
    return v;
}

// Thread i handles float4s i and i + half (half = ceil(n4 / 2)), both loaded before either is stored;
// then element start + i of the scalar part [start, n) (the < 4-element tail, or all of x when unaligned).
__global__ void __launch_bounds__(256) tanh_kernel(const float4* __restrict__ x4, float4* __restrict__ y4,
                                                  int64_t n4, int64_t half, const float* __restrict__ x,
                                                  float* __restrict__ y, int64_t start, int64_t n, float alpha) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t k = i + half;
    if (i < half) {
        float4 a = __ldcs(x4 + i);
        float4 b;
        const bool hb = k < n4;
        if (hb) b = __ldcs(x4 + k);
        __stcs(y4 + i, act4(a, alpha));
        if (hb) __stcs(y4 + k, act4(b, alpha));
    }
    const int64_t j = start + i;
    if (j < n) y[j] = act_fn(x[j], alpha);
}

torch::Tensor tanh_forward(torch::Tensor x, double alpha) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n == 0) return y;
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const bool aligned = ((reinterpret_cast<uintptr_t>(xp) | reinterpret_cast<uintptr_t>(yp)) & 15) == 0;
    const int64_t n4 = aligned ? n / 4 : 0;
    const int64_t half = (n4 + 1) / 2;
    const int64_t start = n4 * 4;
    const int threads = 256;
    const int64_t work = half > (n - start) ? half : (n - start);
    const int64_t blocks = (work + threads - 1) / threads;
    TORCH_CHECK(blocks < (1LL << 31), "tensor too large");
    auto stream = c10::cuda::getCurrentCUDAStream();
    tanh_kernel<<<(unsigned)blocks, threads, 0, stream>>>(
        reinterpret_cast<const float4*>(xp), reinterpret_cast<float4*>(yp), n4, half, xp, yp, start, n, (float)alpha);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_src = "torch::Tensor tanh_forward(torch::Tensor x, double alpha);"

_ext = load_inline(
    name="kb_l1_025_tanh_f4u2_c3",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["tanh_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.tanh_forward(x.contiguous(), 0.0)  # the kernel's alpha argument is unused by tanh
