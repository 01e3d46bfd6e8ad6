# Per-feature clamp: a 2-D grid (float4 column groups x rows) where each thread loads its 4 features' lo/hi once
# (read-only cache) and then streams several rows of x with float4 loads/stores, applying exactly PyTorch's
# clamp(Tensor, Tensor, Tensor) rule (NaN in x, then lo, then hi propagates; else min(max(x, lo), hi)). Eager's
# clamp is one TensorIterator kernel, but the broadcast (stride-0) lo/hi inputs disable its vectorized path, so
# every element pays 3 scalar loads and offset arithmetic; this is a pure 1.5 GiB in / 1.5 GiB out stream, so
# expect ~1.05-1.3x. Feature counts that are not a multiple of 4 (or unaligned data) use a scalar kernel.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>
#include <cmath>

constexpr int THREADS = 256;
constexpr int ROWS_PER_BLOCK = 8;

__device__ __forceinline__ float clamp1(float v, float lo, float hi) {
    if (isnan(v)) return v;
    if (isnan(lo)) return lo;
    if (isnan(hi)) return hi;
    return fminf(fmaxf(v, lo), hi);
}

// grid (ceil(D4 / THREADS), ceil(rows / ROWS_PER_BLOCK) capped); each thread: one float4 column group, its rows
template <bool VEC>
__global__ void __launch_bounds__(THREADS) clamp_rows_kernel(const float* __restrict__ x, const float* __restrict__ lo,
                                                             const float* __restrict__ hi, float* __restrict__ y,
                                                             int64_t rows, int64_t D) {
    const int64_t ncol = VEC ? (D >> 2) : D;
    const int64_t c = (int64_t)blockIdx.x * THREADS + threadIdx.x;
    if (c >= ncol) return;
    const int64_t rstride = (int64_t)gridDim.y * ROWS_PER_BLOCK;
    if (VEC) {
        const float4 l = __ldg(reinterpret_cast<const float4*>(lo) + c);
        const float4 h = __ldg(reinterpret_cast<const float4*>(hi) + c);
        const int64_t D4 = D >> 2;
        for (int64_t r0 = (int64_t)blockIdx.y * ROWS_PER_BLOCK; r0 < rows; r0 += rstride) {
            const int64_t rn = min((int64_t)ROWS_PER_BLOCK, rows - r0);
            float4 v[ROWS_PER_BLOCK];
#pragma unroll
            for (int k = 0; k < ROWS_PER_BLOCK; ++k)
                if (k < rn) v[k] = __ldcs(reinterpret_cast<const float4*>(x) + (r0 + k) * D4 + c);
#pragma unroll
            for (int k = 0; k < ROWS_PER_BLOCK; ++k) {
                if (k < rn) {
                    float4 o;
                    o.x = clamp1(v[k].x, l.x, h.x);
                    o.y = clamp1(v[k].y, l.y, h.y);
                    o.z = clamp1(v[k].z, l.z, h.z);
                    o.w = clamp1(v[k].w, l.w, h.w);
                    __stcs(reinterpret_cast<float4*>(y) + (r0 + k) * D4 + c, o);
                }
            }
        }
    } else {
        const float l = __ldg(lo + c), h = __ldg(hi + c);
        for (int64_t r = (int64_t)blockIdx.y * ROWS_PER_BLOCK; r < rows; r += rstride) {
            const int64_t rn = min((int64_t)ROWS_PER_BLOCK, rows - r);
            for (int64_t k = 0; k < rn; ++k) y[(r + k) * D + c] = clamp1(x[(r + k) * D + c], l, h);
        }
    }
}

// x (..., D) contiguous, lo/hi (D,): y = clamp(x, lo, hi) broadcast over the leading dims
torch::Tensor clamp_per_feature(torch::Tensor x, torch::Tensor lo, torch::Tensor hi) {
    TORCH_CHECK(x.is_cuda() && lo.is_cuda() && hi.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(x.is_contiguous() && lo.is_contiguous() && hi.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && lo.scalar_type() == torch::kFloat32 &&
                hi.scalar_type() == torch::kFloat32, "inputs must be float32");
    TORCH_CHECK(x.dim() >= 1, "x must have a feature dimension");
    const int64_t D = x.size(-1);
    TORCH_CHECK(lo.numel() == D && hi.numel() == D, "bounds must have one value per feature (last dim)");
    auto y = torch::empty_like(x);
    if (x.numel() == 0) return y;
    const int64_t rows = x.numel() / D;
    const bool vec = (D % 4 == 0) &&
        (((reinterpret_cast<uintptr_t>(x.data_ptr<float>()) | reinterpret_cast<uintptr_t>(y.data_ptr<float>()) |
           reinterpret_cast<uintptr_t>(lo.data_ptr<float>()) | reinterpret_cast<uintptr_t>(hi.data_ptr<float>())) & 15) == 0);
    const int64_t ncol = vec ? D / 4 : D;
    const int64_t gx = (ncol + THREADS - 1) / THREADS;
    TORCH_CHECK(gx <= 2147483647LL, "too many features");
    const int64_t gy = std::min<int64_t>((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK, 65535);
    dim3 grid((unsigned)gx, (unsigned)gy);
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (vec) clamp_rows_kernel<true><<<grid, THREADS, 0, stream>>>(x.data_ptr<float>(), lo.data_ptr<float>(),
                                                                  hi.data_ptr<float>(), y.data_ptr<float>(), rows, D);
    else clamp_rows_kernel<false><<<grid, THREADS, 0, stream>>>(x.data_ptr<float>(), lo.data_ptr<float>(),
                                                               hi.data_ptr<float>(), y.data_ptr<float>(), rows, D);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_src = "torch::Tensor clamp_per_feature(torch::Tensor x, torch::Tensor lo, torch::Tensor hi);"

_ext = load_inline(
    name="kb_l1_059_clamp_rowtile",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["clamp_per_feature"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lo = nn.Parameter(-0.5 - torch.rand(dim))
        self.hi = nn.Parameter(0.5 + torch.rand(dim))

    def forward(self, x):
        return _ext.clamp_per_feature(x.contiguous(), self.lo.detach().contiguous(), self.hi.detach().contiguous())
