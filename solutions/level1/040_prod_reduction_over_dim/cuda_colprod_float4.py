# Product over a short non-innermost dim (32 of (1536, 32, 32768)), viewed as (outer, R, inner): with this
# many independent columns each thread owns 4 adjacent inner columns (float4) and multiplies all R rows itself
# (8 independent float4 loads in flight, 256-thread blocks reading 4 KiB contiguous per row, no shared memory);
# with few columns a 32x8 block splits the rows into 8 slices combined in a fixed order. Plain fp32 products.
# One pass over the 6 GiB input, eager's reduction is one kernel too, so expect ~1.0-1.15x. Innermost-dim
# products use a warp-per-row kernel.
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
#include <vector>

constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;
constexpr int UNROLL = 4;

struct Op {  // plain fp32 product
    static __device__ __forceinline__ float ident() { return 1.f; }
    static __device__ __forceinline__ float comb(float a, float v) { return a * v; }
    static __device__ __forceinline__ float project(float a, float) { return a; }
};

__device__ __forceinline__ float4 ident4() { return make_float4(Op::ident(), Op::ident(), Op::ident(), Op::ident()); }
__device__ __forceinline__ void comb4(float4& a, const float4 v) {
    a.x = Op::comb(a.x, v.x); a.y = Op::comb(a.y, v.y); a.z = Op::comb(a.z, v.z); a.w = Op::comb(a.w, v.w);
}

// inner == 1: one warp per row of length R. VEC: R % 4 == 0 and a 16-byte aligned base.
template <bool VEC>
__global__ void __launch_bounds__(THREADS) row_reduce_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                             int64_t rows, int64_t R, float factor) {
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5);
    if (row >= rows) return;
    const float* xr = x + row * R;
    float acc = Op::ident();
    if (VEC) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        const int64_t R4 = R >> 2;
        float4 a = ident4();
        int64_t i = lane;
        for (; i + (UNROLL - 1) * 32 < R4; i += UNROLL * 32) {
            float4 q[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) q[u] = __ldcs(x4 + i + u * 32);
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) comb4(a, q[u]);
        }
        for (; i < R4; i += 32) comb4(a, __ldcs(x4 + i));
        acc = Op::comb(Op::comb(a.x, a.y), Op::comb(a.z, a.w));
    } else {
        for (int64_t j = lane; j < R; j += 32) acc = Op::comb(acc, xr[j]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc = Op::comb(acc, __shfl_xor_sync(0xffffffffu, acc, o));
    if (lane == 0) y[row] = Op::project(acc, factor);
}

// inner > 1: view (outer, R, inner); block (TX, TY): TX columns (float4 groups if VEC) x TY row slices,
// combined through shared memory in a fixed order. grid (ceil(ncol / TX), min(outer, 65535)).
template <bool VEC, int TX, int TY>
__global__ void __launch_bounds__(TX * TY) col_reduce_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                             int64_t outer, int64_t R, int64_t inner, float factor) {
    __shared__ float4 sm[TY][TX];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t ncol = VEC ? (inner >> 2) : inner;
    const int64_t c = (int64_t)blockIdx.x * TX + tx;
    for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
        float4 acc = ident4();
        if (c < ncol) {
            if (VEC) {
                const float4* base = reinterpret_cast<const float4*>(x + o * R * inner) + c;
                const int64_t st = inner >> 2;
                int64_t r = ty;
                for (; r + (int64_t)(2 * UNROLL - 1) * TY < R; r += (int64_t)2 * UNROLL * TY) {
                    float4 v[2 * UNROLL];
#pragma unroll
                    for (int k = 0; k < 2 * UNROLL; ++k) v[k] = __ldcs(base + (r + (int64_t)k * TY) * st);
#pragma unroll
                    for (int k = 0; k < 2 * UNROLL; ++k) comb4(acc, v[k]);
                }
                for (; r < R; r += TY) comb4(acc, __ldcs(base + r * st));
            } else {
                const float* base = x + o * R * inner + c;
                float a = Op::ident();
                int64_t r = ty;
                for (; r + (int64_t)(2 * UNROLL - 1) * TY < R; r += (int64_t)2 * UNROLL * TY) {
                    float v[2 * UNROLL];
#pragma unroll
                    for (int k = 0; k < 2 * UNROLL; ++k) v[k] = __ldcs(base + (r + (int64_t)k * TY) * inner);
#pragma unroll
                    for (int k = 0; k < 2 * UNROLL; ++k) a = Op::comb(a, v[k]);
                }
                for (; r < R; r += TY) a = Op::comb(a, __ldcs(base + r * inner));
                acc.x = a;
            }
        }
        if (TY > 1) {
            sm[ty][tx] = acc;
            __syncthreads();
            if (ty == 0) {
#pragma unroll
                for (int k = 1; k < TY; ++k) comb4(acc, sm[k][tx]);
            }
            __syncthreads();  // sm is reused by the next outer index
        }
        if (ty == 0 && c < ncol) {
            if (VEC) {
                float4 out;
                out.x = Op::project(acc.x, factor); out.y = Op::project(acc.y, factor);
                out.z = Op::project(acc.z, factor); out.w = Op::project(acc.w, factor);
                reinterpret_cast<float4*>(y + o * inner)[c] = out;
            } else {
                y[o * inner + c] = Op::project(acc.x, factor);
            }
        }
    }
}

// reduce x over `dim` (keepdim = False)
torch::Tensor reduce_dim(torch::Tensor x, int64_t dim) {
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
    std::vector<int64_t> osize;
    for (int64_t i = 0; i < nd; ++i) if (i != dim) osize.push_back(x.size(i));
    auto y = torch::empty(osize, x.options());
    if (y.numel() == 0) return y;
    if (R == 0) { y.fill_(1.f); return y; }
    // the reduction's output/input ratio, computed as PyTorch's mean kernel does (unused by the other ops)
    const float factor = (float)y.numel() / (float)x.numel();
    auto stream = c10::cuda::getCurrentCUDAStream();
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const bool al = ((reinterpret_cast<uintptr_t>(xp) | reinterpret_cast<uintptr_t>(yp)) & 15) == 0;
    if (inner == 1) {
        const int64_t rows = outer;
        const int64_t blocks = (rows + WARPS - 1) / WARPS;
        TORCH_CHECK(blocks <= 2147483647LL, "too many rows");
        if (al && R % 4 == 0) row_reduce_kernel<true><<<(unsigned)blocks, THREADS, 0, stream>>>(xp, yp, rows, R, factor);
        else row_reduce_kernel<false><<<(unsigned)blocks, THREADS, 0, stream>>>(xp, yp, rows, R, factor);
    } else {
        const bool vec = al && inner % 4 == 0;
        const int64_t ncol = vec ? inner / 4 : inner;
        int sms = 0;
        C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, x.get_device()));
        // enough independent columns to fill the GPU with one thread each -> no row slicing
        const bool wide = outer * ncol >= (int64_t)sms * 2048;
        const unsigned gy = (unsigned)std::min<int64_t>(outer, 65535);
        if (wide) {
            dim3 grid((unsigned)((ncol + 255) / 256), gy), block(256, 1);
            if (vec) col_reduce_kernel<true, 256, 1><<<grid, block, 0, stream>>>(xp, yp, outer, R, inner, factor);
            else col_reduce_kernel<false, 256, 1><<<grid, block, 0, stream>>>(xp, yp, outer, R, inner, factor);
        } else {
            dim3 grid((unsigned)((ncol + 31) / 32), gy), block(32, 8);
            if (vec) col_reduce_kernel<true, 32, 8><<<grid, block, 0, stream>>>(xp, yp, outer, R, inner, factor);
            else col_reduce_kernel<false, 32, 8><<<grid, block, 0, stream>>>(xp, yp, outer, R, inner, factor);
        }
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_src = "torch::Tensor reduce_dim(torch::Tensor x, int64_t dim);"

_ext = load_inline(
    name="kb_l1_040_prod_colprod",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["reduce_dim"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return _ext.reduce_dim(x.contiguous(), self.dim)
