# Fused triplet margin loss (p = 2): one warp per row streams anchor, positive and negative once with float4
# loads (4 iterations unrolled, 12 loads in flight per lane) and accumulates sum((a - p + eps)^2) and
# sum((a - n + eps)^2) in fp32 (pairwise_distance adds eps to the difference before the norm, and so do we);
# a warp-shuffle reduction gives max(margin + d(a,p) - d(a,n), 0) per row, each block sums its rows in a fixed
# order and a one-block kernel adds the block partials in double and divides by the batch (deterministic, no
# atomics). Eager runs sub, add-eps and norm twice plus the clamp/mean: ~12 passes over 0.5 GiB tensors vs 3
# here, so expect ~3x.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>
#include <cmath>

constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;
constexpr int UNROLL = 4;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

struct Acc {
    float ap = 0.f, an = 0.f, pn = 0.f;  // squared distances a-p, a-n, p-n (the last only with SWAP)
};

template <bool SWAP>
__device__ __forceinline__ void acc1(Acc& s, float a, float p, float n, float eps) {
    const float dp = (a - p) + eps, dn = (a - n) + eps;
    s.ap += dp * dp;
    s.an += dn * dn;
    if (SWAP) { const float ds = (p - n) + eps; s.pn += ds * ds; }
}

template <bool SWAP>
__device__ __forceinline__ void acc4(Acc& s, const float4 a, const float4 p, const float4 n, float eps) {
    acc1<SWAP>(s, a.x, p.x, n.x, eps);
    acc1<SWAP>(s, a.y, p.y, n.y, eps);
    acc1<SWAP>(s, a.z, p.z, n.z, eps);
    acc1<SWAP>(s, a.w, p.w, n.w, eps);
}

// One warp per row; writes the per-row loss (if row_loss) and per-block sums of the row losses.
// VEC: D % 4 == 0 and all three bases 16-byte aligned (then every row is aligned).
template <bool VEC, bool SWAP>
__global__ void __launch_bounds__(THREADS) triplet_rows_kernel(const float* __restrict__ A, const float* __restrict__ P,
                                                               const float* __restrict__ N, int64_t rows, int64_t D,
                                                               float margin, float eps, float* __restrict__ row_loss,
                                                               float* __restrict__ partials) {
    __shared__ float rl[WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t row = (int64_t)blockIdx.x * WARPS + warp;
    float loss = 0.f;
    if (row < rows) {
        const float* ar = A + row * D;
        const float* pr = P + row * D;
        const float* nr = N + row * D;
        Acc s;
        if (VEC) {
            const float4* a4 = reinterpret_cast<const float4*>(ar);
            const float4* p4 = reinterpret_cast<const float4*>(pr);
            const float4* n4 = reinterpret_cast<const float4*>(nr);
            const int64_t D4 = D >> 2;
            int64_t i = lane;
            for (; i + (UNROLL - 1) * 32 < D4; i += UNROLL * 32) {
                float4 a[UNROLL], p[UNROLL], n[UNROLL];
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    a[u] = __ldcs(a4 + i + u * 32);
                    p[u] = __ldcs(p4 + i + u * 32);
                    n[u] = __ldcs(n4 + i + u * 32);
                }
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) acc4<SWAP>(s, a[u], p[u], n[u], eps);
            }
            for (; i < D4; i += 32) acc4<SWAP>(s, __ldcs(a4 + i), __ldcs(p4 + i), __ldcs(n4 + i), eps);
        } else {
            for (int64_t j = lane; j < D; j += 32) acc1<SWAP>(s, ar[j], pr[j], nr[j], eps);
        }
        const float dpos = sqrtf(warp_sum(s.ap));
        float dneg = sqrtf(warp_sum(s.an));
        if (SWAP) dneg = fminf(dneg, sqrtf(warp_sum(s.pn)));
        loss = fmaxf(margin + dpos - dneg, 0.f);
        if (row_loss != nullptr && lane == 0) row_loss[row] = loss;
    }
    if (lane == 0) rl[warp] = loss;  // rows past the end contribute 0
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) t += rl[w];
        partials[blockIdx.x] = t;
    }
}

// One block: fixed-order double-precision sum of the per-block partials, times scale.
__global__ void __launch_bounds__(1024) finalize_kernel(const float* __restrict__ partials, int64_t nparts,
                                                        double scale, float* __restrict__ out) {
    __shared__ double red[32];
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < nparts; i += 1024) acc += (double)partials[i];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    acc = warp_sum_d(acc);
    if (lane == 0) red[wid] = acc;
    __syncthreads();
    if (wid == 0) {
        double v = red[lane];
        v = warp_sum_d(v);
        if (lane == 0) out[0] = (float)(v * scale);
    }
}

// reduction: 0 = none, 1 = mean, 2 = sum. Inputs (rows, D), distances over the last dim.
torch::Tensor triplet_forward(torch::Tensor A, torch::Tensor P, torch::Tensor N, double margin, double eps,
                              bool swap, int64_t reduction) {
    TORCH_CHECK(A.is_cuda() && P.is_cuda() && N.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(A.is_contiguous() && P.is_contiguous() && N.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(A.scalar_type() == torch::kFloat32 && P.scalar_type() == torch::kFloat32 &&
                N.scalar_type() == torch::kFloat32, "inputs must be float32");
    TORCH_CHECK(A.dim() == 2 && A.sizes() == P.sizes() && A.sizes() == N.sizes(), "inputs must be 2-D with equal shapes");
    TORCH_CHECK(reduction >= 0 && reduction <= 2, "bad reduction");
    const int64_t rows = A.size(0), D = A.size(1);
    auto out = torch::empty({}, A.options());
    torch::Tensor row_loss;
    if (reduction == 0) row_loss = torch::empty({rows}, A.options());
    if (rows == 0) {
        if (reduction == 0) return row_loss;
        out.fill_(reduction == 1 ? NAN : 0.f);
        return out;
    }
    const int64_t blocks = (rows + WARPS - 1) / WARPS;
    TORCH_CHECK(blocks <= 2147483647LL, "too many rows");
    auto partials = torch::empty({blocks}, A.options());
    const bool vec = (D % 4 == 0) &&
        (((reinterpret_cast<uintptr_t>(A.data_ptr<float>()) | reinterpret_cast<uintptr_t>(P.data_ptr<float>()) |
           reinterpret_cast<uintptr_t>(N.data_ptr<float>())) & 15) == 0);
    float* rlp = reduction == 0 ? row_loss.data_ptr<float>() : nullptr;
    auto stream = c10::cuda::getCurrentCUDAStream();
#define KB_LAUNCH(V, S) triplet_rows_kernel<V, S><<<(unsigned)blocks, THREADS, 0, stream>>>( \
        A.data_ptr<float>(), P.data_ptr<float>(), N.data_ptr<float>(), rows, D, (float)margin, (float)eps, rlp, \
        partials.data_ptr<float>())
    if (vec) { if (swap) KB_LAUNCH(true, true); else KB_LAUNCH(true, false); }
    else     { if (swap) KB_LAUNCH(false, true); else KB_LAUNCH(false, false); }
#undef KB_LAUNCH
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    if (reduction == 0) return row_loss;
    finalize_kernel<<<1, 1024, 0, stream>>>(partials.data_ptr<float>(), blocks,
                                            reduction == 1 ? 1.0 / (double)rows : 1.0, out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_src = ("torch::Tensor triplet_forward(torch::Tensor A, torch::Tensor P, torch::Tensor N, double margin, double eps, "
           "bool swap, int64_t reduction);")

_ext = load_inline(
    name="kb_l1_057_triplet_warp_rows",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["triplet_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)

_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


class ModelNew(nn.Module):
    def __init__(self, margin):
        super().__init__()
        self.loss_fn = nn.TripletMarginLoss(margin=margin)

    def forward(self, anchor, positive, negative):
        lf = self.loss_fn
        assert float(lf.p) == 2.0, "only the L2 distance is implemented"
        assert anchor.shape == positive.shape == negative.shape and anchor.dim() in (1, 2)
        a, p, n = (t.reshape(1, -1) if t.dim() == 1 else t for t in (anchor, positive, negative))
        out = _ext.triplet_forward(a.contiguous(), p.contiguous(), n.contiguous(), float(lf.margin), float(lf.eps),
                                   bool(lf.swap), _REDUCTIONS[lf.reduction])
        if lf.reduction == "none" and anchor.dim() == 1:
            out = out.reshape(())
        return out
