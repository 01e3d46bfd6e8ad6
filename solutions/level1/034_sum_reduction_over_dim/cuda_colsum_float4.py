# Sum over a non-innermost dim (view x as (outer, R, inner), reduce R). Each thread owns 4 adjacent inner
# columns (float4), a 32x8 thread block covers 128 columns with 8 row-slices, every warp reads 512 contiguous
# bytes per row (fully coalesced), 8 independent float4 loads are in flight per thread, and the 8 slices are
# combined through shared memory in a fixed order (deterministic, no atomics). Pure HBM streaming of the 6 GiB
# input in one kernel; eager's generic TensorIterator reduction is also one kernel, so expect ~1.0-1.15x.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>
#include <vector>

constexpr int TX = 32;  // float4 columns per block
constexpr int TY = 8;   // row slices per block
constexpr int UNROLL = 8;

__device__ __forceinline__ void add4(float4& a, const float4 b) {
    a.x += b.x; a.y += b.y; a.z += b.z; a.w += b.w;
}

// grid: (ceil(inner4 / TX), outer); block: (TX, TY)
__global__ void __launch_bounds__(TX * TY) colsum_kernel(const float4* __restrict__ x, float4* __restrict__ y,
                                                        int64_t R, int64_t inner4) {
    __shared__ float4 sm[TY][TX];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t o = blockIdx.y;
    const int64_t c = (int64_t)blockIdx.x * TX + tx;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    if (c < inner4) {
        const float4* base = x + o * R * inner4 + c;
        int64_t r = ty;
        for (; r + (int64_t)(UNROLL - 1) * TY < R; r += (int64_t)UNROLL * TY) {
            float4 v[UNROLL];
#pragma unroll
            for (int k = 0; k < UNROLL; ++k) v[k] = __ldcs(base + (r + (int64_t)k * TY) * inner4);
#pragma unroll
            for (int k = 0; k < UNROLL; ++k) add4(acc, v[k]);
        }
        for (; r < R; r += TY) add4(acc, __ldcs(base + r * inner4));
    }
    sm[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && c < inner4) {
        float4 t = sm[0][tx];
#pragma unroll
        for (int k = 1; k < TY; ++k) add4(t, sm[k][tx]);
        y[o * inner4 + c] = t;
    }
}

// sum over `dim` with keepdim=True
torch::Tensor sum_dim_keepdim(torch::Tensor x, int64_t dim) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    const int64_t nd = x.dim();
    TORCH_CHECK(nd >= 1, "x must have at least one dimension");
    if (dim < 0) dim += nd;
    TORCH_CHECK(dim >= 0 && dim < nd, "dim out of range");
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < dim; ++i) outer *= x.size(i);
    for (int64_t i = dim + 1; i < nd; ++i) inner *= x.size(i);
    const int64_t R = x.size(dim);
    TORCH_CHECK(inner % 4 == 0, "this kernel needs the inner (post-dim) size to be a multiple of 4");
    TORCH_CHECK((reinterpret_cast<uintptr_t>(x.data_ptr<float>()) & 15) == 0, "x must be 16-byte aligned");
    std::vector<int64_t> osize(x.sizes().begin(), x.sizes().end());
    osize[dim] = 1;
    auto y = torch::empty(osize, x.options());
    if (y.numel() == 0) return y;
    if (R == 0) { y.zero_(); return y; }
    const int64_t inner4 = inner / 4;
    TORCH_CHECK(outer <= 65535, "outer size too large for this launch configuration");
    dim3 grid((unsigned)((inner4 + TX - 1) / TX), (unsigned)outer);
    dim3 block(TX, TY);
    auto stream = c10::cuda::getCurrentCUDAStream();
    colsum_kernel<<<grid, block, 0, stream>>>(reinterpret_cast<const float4*>(x.data_ptr<float>()),
                                              reinterpret_cast<float4*>(y.data_ptr<float>()), R, inner4);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_src = "torch::Tensor sum_dim_keepdim(torch::Tensor x, int64_t dim);"

_ext = load_inline(
    name="kb_l1_034_sum_dim_colsum",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["sum_dim_keepdim"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return _ext.sum_dim_keepdim(x.contiguous(), self.dim)
