# GPT causal self-attention with a fused scale + causal-mask + softmax kernel.
# The QKV / output projections and the two batched attention matmuls stay in cuBLAS (module's own
# weights). The (B, H, T, T) score tensor (800 MB here) is then normalized in place by one custom
# kernel: one 128-thread block per query row keeps the row in registers (float4), reads only the
# unmasked prefix j <= i, applies the 1/sqrt(d) scale, does warp-shuffle + shared-memory max and sum
# reductions, and writes probabilities (zeros above the diagonal).
# Eager PyTorch makes three separate full read+write passes over the scores (scale, masked_fill with
# a broadcast mask compare, softmax) and allocates three score-sized temporaries; this does one pass
# that reads about half the row on average.
import math
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = r"""
void causal_softmax_(torch::Tensor att, double scale);
"""

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <cstdint>
#include <math_constants.h>

#define SM_THREADS 128

template <int NV>
__global__ void __launch_bounds__(SM_THREADS)
causal_softmax_kernel(float* __restrict__ att, int T, float scale) {
    __shared__ float red_max[SM_THREADS / 32];
    __shared__ float red_sum[SM_THREADS / 32];
    const size_t r = blockIdx.x;                 // row index over B*H*T
    const int i = (int)(r % (size_t)T);          // query position: keys j <= i are visible
    float4* row = reinterpret_cast<float4*>(att + r * (size_t)T);
    const int n4 = T >> 2;
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;

    float4 v[NV];
    float mx = -CUDART_INF_F;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int j4 = threadIdx.x + k * SM_THREADS;
        const int j = j4 << 2;
        if (j4 < n4 && j <= i) {
            float4 t = row[j4];
            t.x = t.x * scale;
            t.y = (j + 1 <= i) ? t.y * scale : -CUDART_INF_F;
            t.z = (j + 2 <= i) ? t.z * scale : -CUDART_INF_F;
            t.w = (j + 3 <= i) ? t.w * scale : -CUDART_INF_F;
            v[k] = t;
            mx = fmaxf(mx, fmaxf(fmaxf(t.x, t.y), fmaxf(t.z, t.w)));
        } else {
            v[k] = make_float4(-CUDART_INF_F, -CUDART_INF_F, -CUDART_INF_F, -CUDART_INF_F);
        }
    }
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (lane == 0) red_max[wid] = mx;
    __syncthreads();
    mx = red_max[0];
#pragma unroll
    for (int w = 1; w < SM_THREADS / 32; ++w) mx = fmaxf(mx, red_max[w]);   // finite: j = 0 is always visible

    float s = 0.f;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int j = (threadIdx.x + k * SM_THREADS) << 2;
        v[k].x = (j <= i) ? expf(v[k].x - mx) : 0.f;
        v[k].y = (j + 1 <= i) ? expf(v[k].y - mx) : 0.f;
        v[k].z = (j + 2 <= i) ? expf(v[k].z - mx) : 0.f;
        v[k].w = (j + 3 <= i) ? expf(v[k].w - mx) : 0.f;
        s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) red_sum[wid] = s;
    __syncthreads();
    s = 0.f;
#pragma unroll
    for (int w = 0; w < SM_THREADS / 32; ++w) s += red_sum[w];

#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int j4 = threadIdx.x + k * SM_THREADS;
        if (j4 < n4) {
            float4 t = v[k];
            t.x = t.x / s; t.y = t.y / s; t.z = t.z / s; t.w = t.w / s;
            row[j4] = t;
        }
    }
}

void causal_softmax_(torch::Tensor att, double scale) {
    TORCH_CHECK(att.is_cuda(), "att must be a CUDA tensor");
    TORCH_CHECK(att.is_contiguous(), "att must be contiguous");
    TORCH_CHECK(att.scalar_type() == at::kFloat, "att must be float32");
    TORCH_CHECK(att.dim() == 4 && att.size(2) == att.size(3), "att must be (B, H, T, T)");
    const int64_t T = att.size(3);
    TORCH_CHECK(T % 4 == 0 && T <= 8 * 4 * SM_THREADS, "T must be a multiple of 4 and at most 4096");
    TORCH_CHECK((reinterpret_cast<uintptr_t>(att.data_ptr<float>()) & 15u) == 0, "att must be 16-byte aligned");
    const int64_t rows = att.numel() / T;
    TORCH_CHECK(rows < (int64_t(1) << 31), "too many rows");
    if (rows == 0) return;
    const int64_t nv = (T / 4 + SM_THREADS - 1) / SM_THREADS;
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    float* p = att.data_ptr<float>();
    const unsigned int grid = (unsigned int)rows;
    if (nv <= 1)      causal_softmax_kernel<1><<<grid, SM_THREADS, 0, stream>>>(p, (int)T, (float)scale);
    else if (nv <= 2) causal_softmax_kernel<2><<<grid, SM_THREADS, 0, stream>>>(p, (int)T, (float)scale);
    else if (nv <= 4) causal_softmax_kernel<4><<<grid, SM_THREADS, 0, stream>>>(p, (int)T, (float)scale);
    else              causal_softmax_kernel<8><<<grid, SM_THREADS, 0, stream>>>(p, (int)T, (float)scale);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_ext = load_inline(
    name="kb_l3_015_gpt_causal_softmax",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["causal_softmax_"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, n_embd, n_head, max_seqlen):
        super().__init__()
        assert n_embd % n_head == 0
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.register_buffer(
            "bias", torch.tril(torch.ones(max_seqlen, max_seqlen)).view(1, 1, max_seqlen, max_seqlen)
        )
        self.n_head = n_head
        self.n_embd = n_embd

    def forward(self, x):
        B, T, C = x.size()
        hd = C // self.n_head
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, hd).transpose(1, 2)
        q = q.view(B, T, self.n_head, hd).transpose(1, 2)
        v = v.view(B, T, self.n_head, hd).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)).contiguous()   # (B, H, T, T), unscaled scores
        _ext.causal_softmax_(att, 1.0 / math.sqrt(hd))             # in place: scale, mask, softmax
        y = torch.matmul(att, v)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)
