# Row cumsum (inclusive scan along the last dim) in one pass: one 256-thread block per row loads 4096-element
# chunks with coalesced float4 loads (4 per thread, all in flight), scans each float4 in registers, scans the
# per-thread totals with warp shuffles and the 32 warp totals through shared memory (fixed order), and writes
# the result with float4 stores: one read + one write of the 1 GiB tensor. Eager's innermost-dim scan kernel
# works on 2*32-element tiles per row with shared-memory up/down sweeps (many more syncs, narrow accesses), so
# expect ~1.2-2x. Longer rows carry the running total across chunks; lengths not a multiple of 4 (or unaligned
# rows) use a scalar load/store path.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>

constexpr int THREADS = 256;
constexpr int NWARPS = THREADS / 32;
constexpr int ITEMS = 4;                       // float4 groups per thread per chunk
constexpr int CHUNK = THREADS * 4 * ITEMS;     // 4096 elements per chunk

struct AddOp {
    static __device__ __forceinline__ float ident() { return 0.f; }
    static __device__ __forceinline__ float apply(float a, float b) { return a + b; }
};

// Inclusive scan of one row of length D (logical order = physical order, or reversed when REVERSE).
// Logical element e of a chunk: e = 4 * (k * THREADS + tid) + c, k < ITEMS, c < 4.
template <class Op, bool REVERSE, bool VEC>
__global__ void __launch_bounds__(THREADS) row_scan_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                           int64_t D) {
    __shared__ float wt[2][ITEMS][NWARPS];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t row = blockIdx.x;
    const float* xr = x + row * D;
    float* yr = y + row * D;
    float carry = Op::ident();
    int buf = 0;
    for (int64_t base = 0; base < D; base += CHUNK, buf ^= 1) {
        float v[ITEMS][4];
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const int64_t p = base + 4 * (int64_t)(k * THREADS + tid);  // logical index of component 0
            if (VEC && p + 4 <= D) {
                // D % 4 == 0 here, so the physical group [D-4-p, D-p) is float4-aligned in the reversed case
                const float4 q = REVERSE ? __ldcs(reinterpret_cast<const float4*>(xr + (D - 4 - p)))
                                         : __ldcs(reinterpret_cast<const float4*>(xr + p));
                if (REVERSE) { v[k][0] = q.w; v[k][1] = q.z; v[k][2] = q.y; v[k][3] = q.x; }
                else         { v[k][0] = q.x; v[k][1] = q.y; v[k][2] = q.z; v[k][3] = q.w; }
            } else {
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    const int64_t e = p + c;
                    v[k][c] = (e < D) ? (REVERSE ? xr[D - 1 - e] : xr[e]) : Op::ident();
                }
            }
        }
        // thread-local inclusive scan of each group of 4
        float incl[ITEMS];
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            v[k][1] = Op::apply(v[k][0], v[k][1]);
            v[k][2] = Op::apply(v[k][1], v[k][2]);
            v[k][3] = Op::apply(v[k][2], v[k][3]);
            incl[k] = v[k][3];
        }
        // warp inclusive scan of the per-thread totals (ITEMS independent scans, interleaved)
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
#pragma unroll
            for (int k = 0; k < ITEMS; ++k) {
                const float n = __shfl_up_sync(0xffffffffu, incl[k], o);
                if (lane >= o) incl[k] = Op::apply(n, incl[k]);
            }
        }
        float excl[ITEMS];
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const float n = __shfl_up_sync(0xffffffffu, incl[k], 1);
            excl[k] = (lane == 0) ? Op::ident() : n;
            if (lane == 31) wt[buf][k][warp] = incl[k];
        }
        __syncthreads();
        // prefix of everything before (sub-tile k, this warp) in logical order, in a fixed order
        float run = carry;
        float woff[ITEMS];
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            woff[k] = Op::ident();
#pragma unroll
            for (int w = 0; w < NWARPS; ++w) {
                if (w == warp) woff[k] = run;
                run = Op::apply(run, wt[buf][k][w]);
            }
        }
        carry = run;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const float off = Op::apply(woff[k], excl[k]);
            const int64_t p = base + 4 * (int64_t)(k * THREADS + tid);
            float o[4];
#pragma unroll
            for (int c = 0; c < 4; ++c) o[c] = Op::apply(off, v[k][c]);
            if (VEC && p + 4 <= D) {
                if (REVERSE) __stcs(reinterpret_cast<float4*>(yr + (D - 4 - p)), make_float4(o[3], o[2], o[1], o[0]));
                else         __stcs(reinterpret_cast<float4*>(yr + p), make_float4(o[0], o[1], o[2], o[3]));
            } else {
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    const int64_t e = p + c;
                    if (e < D) { if (REVERSE) yr[D - 1 - e] = o[c]; else yr[e] = o[c]; }
                }
            }
        }
        // the next chunk writes the other wt buffer; a warp can only reach the one after that (this buffer
        // again) by passing the next chunk's __syncthreads, which every warp reaches after its reads above
    }
}

// inclusive prefix sums along the last dimension
torch::Tensor cumsum_lastdim(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension");
    auto y = torch::empty_like(x);
    const int64_t D = x.size(-1);
    if (x.numel() == 0) return y;
    const int64_t rows = x.numel() / D;
    TORCH_CHECK(rows <= 2147483647LL, "too many rows");
    const bool vec = (D % 4 == 0) &&
        (((reinterpret_cast<uintptr_t>(x.data_ptr<float>()) | reinterpret_cast<uintptr_t>(y.data_ptr<float>())) & 15) == 0);
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (vec) row_scan_kernel<AddOp, false, true><<<(unsigned)rows, THREADS, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), D);
    else     row_scan_kernel<AddOp, false, false><<<(unsigned)rows, THREADS, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), D);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_src = "torch::Tensor cumsum_lastdim(torch::Tensor x);"

_ext = load_inline(
    name="kb_l1_049_cumsum_block_scan",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["cumsum_lastdim"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        d = self.dim % x.dim() if x.dim() > 0 else 0
        if x.dim() == 0:
            return x.clone()
        if d == x.dim() - 1:
            return _ext.cumsum_lastdim(x.contiguous())
        # scan dim not innermost: move it last (copy), scan, move it back
        y = _ext.cumsum_lastdim(x.movedim(d, -1).contiguous())
        return y.movedim(-1, d).contiguous()
