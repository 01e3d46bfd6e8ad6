# Fused cross-entropy (mean over the batch): one warp per row streams the logits once with float4 loads and
# keeps an online log-sum-exp per lane (running max m and sum of exp(x - m), rescaled when the max grows);
# lanes are merged with warp shuffles, the row loss is logsumexp - logit[target] (targets equal to
# ignore_index contribute nothing and are not counted, as F.cross_entropy), each block sums its rows in a fixed
# order and a one-block kernel adds the block partials in double and divides by the number of counted rows.
# Eager writes the full log_softmax (1.75 GiB) and reads it back for nll_loss: ~3.5 GiB of traffic vs 1.75
# here, so expect ~2x.
import torch
import torch.nn as nn
import torch.nn.functional as F
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

__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ long long warp_sum_ll(long long v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Online log-sum-exp state: the value is m + log(s).
__device__ __forceinline__ void lse_add4(float& m, float& s, const float4 q) {
    const float mx = fmaxf(fmaxf(q.x, q.y), fmaxf(q.z, q.w));
    if (mx > m) { s *= expf(m - mx); m = mx; }  // expf(-inf) = 0 for the first update
    if (m == -INFINITY) {  // everything so far is -inf (adds 0) or NaN (poisons the sum, as in PyTorch)
        if (isnan(q.x) || isnan(q.y) || isnan(q.z) || isnan(q.w)) s = NAN;
        return;
    }
    s += (expf(q.x - m) + expf(q.y - m)) + (expf(q.z - m) + expf(q.w - m));
}
__device__ __forceinline__ void lse_add1(float& m, float& s, const float x) {
    if (x > m) { s *= expf(m - x); m = x; }
    if (m == -INFINITY) { if (isnan(x)) s = NAN; return; }
    s += expf(x - m);
}
__device__ __forceinline__ void lse_merge(float& m, float& s, float m2, float s2) {
    const float M = fmaxf(m, m2);
    if (M == -INFINITY) { s = s + s2; m = M; return; }  // both empty / all -inf
    s = s * expf(m - M) + s2 * expf(m2 - M);
    m = M;
}

// One warp per row. VEC: C % 4 == 0 and the base 16-byte aligned (then every row is aligned).
template <bool VEC>
__global__ void __launch_bounds__(THREADS) ce_rows_kernel(const float* __restrict__ logits,
                                                          const int64_t* __restrict__ targets, int64_t rows, int64_t C,
                                                          int64_t ignore_index, float* __restrict__ part_loss,
                                                          int* __restrict__ part_cnt) {
    __shared__ float rl[WARPS];
    __shared__ int rc[WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t row = (int64_t)blockIdx.x * WARPS + warp;
    float loss = 0.f;
    int cnt = 0;
    if (row < rows) {
        const int64_t t = targets[row];
        if (t != ignore_index) {
            const float* xr = logits + row * C;
            float m = -INFINITY, s = 0.f;
            if (VEC) {
                const float4* x4 = reinterpret_cast<const float4*>(xr);
                const int64_t C4 = C >> 2;
                int64_t i = lane;
                for (; i + (UNROLL - 1) * 32 < C4; i += UNROLL * 32) {
                    float4 q[UNROLL];
#pragma unroll
                    for (int u = 0; u < UNROLL; ++u) q[u] = __ldcs(x4 + i + u * 32);
#pragma unroll
                    for (int u = 0; u < UNROLL; ++u) lse_add4(m, s, q[u]);
                }
                for (; i < C4; i += 32) lse_add4(m, s, __ldcs(x4 + i));
            } else {
                for (int64_t j = lane; j < C; j += 32) lse_add1(m, s, xr[j]);
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
                const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
                lse_merge(m, s, m2, s2);
            }
            const float lse = m + logf(s);
            // an out-of-range target is a device-side error in PyTorch; here it gives NaN
            const float xt = (t >= 0 && t < C) ? xr[t] : NAN;
            loss = lse - xt;
            cnt = 1;
        }
    }
    if (lane == 0) { rl[warp] = loss; rc[warp] = cnt; }
    __syncthreads();
    if (threadIdx.x == 0) {
        float ls = 0.f;
        int cs = 0;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) { ls += rl[w]; cs += rc[w]; }
        part_loss[blockIdx.x] = ls;
        part_cnt[blockIdx.x] = cs;
    }
}

// One block: fixed-order double sum of the block partials; mean = sum / count (count 0 gives NaN, as PyTorch).
__global__ void __launch_bounds__(1024) finalize_kernel(const float* __restrict__ part_loss,
                                                        const int* __restrict__ part_cnt, int64_t nparts,
                                                        int mode, float* __restrict__ out) {
    __shared__ double red[32];
    __shared__ long long redc[32];
    double acc = 0.0;
    long long cnt = 0;
    for (int64_t i = threadIdx.x; i < nparts; i += 1024) { acc += (double)part_loss[i]; cnt += part_cnt[i]; }
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    acc = warp_sum_d(acc);
    cnt = warp_sum_ll(cnt);
    if (lane == 0) { red[wid] = acc; redc[wid] = cnt; }
    __syncthreads();
    if (wid == 0) {
        double v = warp_sum_d(red[lane]);
        long long c = warp_sum_ll(redc[lane]);
        if (lane == 0) out[0] = (mode == 1) ? (float)(v / (double)c) : (float)v;  // 0/0 -> NaN
    }
}

// mode: 1 = mean over non-ignored rows, 2 = sum. logits (rows, C) float32, targets (rows,) int64.
torch::Tensor cross_entropy_forward(torch::Tensor logits, torch::Tensor targets, int64_t ignore_index, int64_t mode) {
    TORCH_CHECK(logits.is_cuda() && targets.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(logits.is_contiguous() && targets.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(logits.scalar_type() == torch::kFloat32, "logits must be float32");
    TORCH_CHECK(targets.scalar_type() == torch::kInt64, "targets must be int64 class indices");
    TORCH_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0), "shape mismatch");
    TORCH_CHECK(mode == 1 || mode == 2, "bad reduction");
    const int64_t rows = logits.size(0), C = logits.size(1);
    auto out = torch::empty({}, logits.options());
    if (rows == 0) { out.fill_(mode == 1 ? NAN : 0.f); return out; }
    const int64_t blocks = (rows + WARPS - 1) / WARPS;
    TORCH_CHECK(blocks <= 2147483647LL, "too many rows");
    auto part_loss = torch::empty({blocks}, logits.options());
    auto part_cnt = torch::empty({blocks}, logits.options().dtype(torch::kInt32));
    const bool vec = (C % 4 == 0) && ((reinterpret_cast<uintptr_t>(logits.data_ptr<float>()) & 15) == 0);
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (vec) ce_rows_kernel<true><<<(unsigned)blocks, THREADS, 0, stream>>>(
        logits.data_ptr<float>(), targets.data_ptr<int64_t>(), rows, C, ignore_index, part_loss.data_ptr<float>(),
        part_cnt.data_ptr<int>());
    else ce_rows_kernel<false><<<(unsigned)blocks, THREADS, 0, stream>>>(
        logits.data_ptr<float>(), targets.data_ptr<int64_t>(), rows, C, ignore_index, part_loss.data_ptr<float>(),
        part_cnt.data_ptr<int>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    finalize_kernel<<<1, 1024, 0, stream>>>(part_loss.data_ptr<float>(), part_cnt.data_ptr<int>(), blocks, (int)mode,
                                            out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_src = "torch::Tensor cross_entropy_forward(torch::Tensor logits, torch::Tensor targets, int64_t ignore_index, int64_t mode);"

_ext = load_inline(
    name="kb_l1_053_cross_entropy_online_lse",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["cross_entropy_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        # F.cross_entropy defaults: weight=None, ignore_index=-100, reduction='mean', label_smoothing=0.
        # Class dim is 1; extra spatial dims (N, C, d1, ...) become extra rows.
        if logits.dim() == 1:
            logits, targets = logits.unsqueeze(0), targets.reshape(1)
        elif logits.dim() > 2:
            C = logits.size(1)
            logits = logits.movedim(1, -1).reshape(-1, C)
            targets = targets.reshape(-1)
        return _ext.cross_entropy_forward(logits.contiguous(), targets.contiguous().long(), -100, 1)
