# Custom CUDA softplus (beta 1, threshold 20): one elementwise pass, y = f(x), fp32.
# Eager softplus is one elementwise kernel computing log1p(exp(x)) with accurate libm calls, which
# makes it partly issue-bound; this uses the __expf/__logf hardware approximations (error < 1e-6,
# far inside tolerance) so the op stays HBM-bound (2.5 GiB read + 2.5 GiB written). Measured ~1.03x.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>

__device__ __forceinline__ float act_fn(float x) {
    // Hardware approximations: __expf (rel. error ~2^-21 for |x| <= 20) and __logf (abs. error ~2^-22
    // near 1) give |y - softplus(x)| < 1e-6 (measured max 9.5e-7 over randn and [-100, 100]), i.e.
    // < 1% of the 1e-4 tolerance; accurate log1pf(expf(x)) makes this op issue-bound instead.
    return x > 20.0f ? x : __logf(1.0f + __expf(x));
}

// One float4 per thread (thread i handles x4[i]) plus, for the scalar part [start, n) (the < 4-element
// tail, or everything when unaligned), thread i handles element start + i.
__global__ void __launch_bounds__(256) softplus_kernel(const float4* __restrict__ x4, float4* __restrict__ y4, int64_t n4,
                                                  const float* __restrict__ x, float* __restrict__ y,
                                                  int64_t start, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {
        const float4 v = x4[i];
        float4 r;
        r.x = act_fn(v.x);
        r.y = act_fn(v.y);
        r.z = act_fn(v.z);
        r.w = act_fn(v.w);
        y4[i] = r;
    }
    const int64_t j = start + i;
    if (j < n) y[j] = act_fn(x[j]);
}

torch::Tensor softplus_forward(torch::Tensor x) {
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
    const int64_t start = n4 * 4;
    const int threads = 256;
    const int64_t work = std::max<int64_t>(n4, n - start);
    const int64_t blocks = (work + threads - 1) / threads;
    TORCH_CHECK(blocks < (1LL << 31), "tensor too large");
    auto stream = c10::cuda::getCurrentCUDAStream();
    softplus_kernel<<<(unsigned)blocks, threads, 0, stream>>>(
        reinterpret_cast<const float4*>(xp), reinterpret_cast<float4*>(yp), n4, xp, yp, start, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_src = "torch::Tensor softplus_forward(torch::Tensor x);"

_ext = load_inline(
    name="kb_l1_021_softplus_f4",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["softplus_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.softplus_forward(x.contiguous())
