# Row log-softmax (rows of <= 8192 floats, multiple of 4): one 256-thread block per row loads the row once into
# registers with float4 loads, does a block max (warp shuffles + shared memory), sums exp(x - max) from the
# registers, and writes x - max - log(sum): exactly one HBM read and one write per element (1.5 GiB each way).
# Eager's log_softmax is a single kernel too but reads the row again for each of its passes (max, sum, write),
# so expect ~1.2-1.5x as for softmax. Other row lengths or unaligned rows take a generic fallback (max, sum
# and write passes over the row) that is correct for any length.
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
constexpr int NWARPS = THREADS / 32;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float block_sum(float v, float* red) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) red[wid] = v;
    __syncthreads();
    float t = (lane < NWARPS) ? red[lane] : 0.f;
    t = warp_sum(t);
    __syncthreads();
    return t;
}
__device__ __forceinline__ float block_max(float v, float* red) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    v = warp_max(v);
    if (lane == 0) red[wid] = v;
    __syncthreads();
    float t = (lane < NWARPS) ? red[lane] : -INFINITY;
    t = warp_max(t);
    __syncthreads();
    return t;
}
__device__ __forceinline__ float max4(const float4 v) { return fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)); }

// VPT = float4 vectors held per thread; requires D % 4 == 0, 16-byte aligned rows and D/4 <= VPT*THREADS.
template <int VPT>
__global__ void __launch_bounds__(THREADS) log_softmax_rowreg_kernel(const float* __restrict__ x,
                                                                     float* __restrict__ y, int D) {
    __shared__ float red[NWARPS];
    const int nvec = D >> 2;
    const int64_t row = blockIdx.x;
    const float4* xr = reinterpret_cast<const float4*>(x + row * D);
    float4* yr = reinterpret_cast<float4*>(y + row * D);

    float4 v[VPT];
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int idx = threadIdx.x + i * THREADS;
        if (idx < nvec) {
            v[i] = __ldcs(xr + idx);
            m = fmaxf(m, max4(v[i]));
        } else {
            v[i] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
    }
    m = block_max(m, red);

    float s = 0.f;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int idx = threadIdx.x + i * THREADS;
        if (idx < nvec) {
            s += (expf(v[i].x - m) + expf(v[i].y - m)) + (expf(v[i].z - m) + expf(v[i].w - m));
        }
    }
    s = block_sum(s, red);
    const float ls = logf(s);  // output (x - max) - log(sum), PyTorch's epilogue

#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int idx = threadIdx.x + i * THREADS;
        if (idx < nvec) {
            float4 o;
            o.x = (v[i].x - m) - ls;
            o.y = (v[i].y - m) - ls;
            o.z = (v[i].z - m) - ls;
            o.w = (v[i].w - m) - ls;
            __stcs(yr + idx, o);
        }
    }
}

// Any row length: a max pass, a sum-of-exp pass and a write pass over the row.
__global__ void __launch_bounds__(THREADS) log_softmax_generic_kernel(const float* __restrict__ x,
                                                                      float* __restrict__ y, int64_t D) {
    __shared__ float red[NWARPS];
    const int64_t row = blockIdx.x;
    const float* xr = x + row * D;
    float* yr = y + row * D;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < D; i += THREADS) m = fmaxf(m, xr[i]);
    m = block_max(m, red);
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < D; i += THREADS) s += expf(xr[i] - m);
    s = block_sum(s, red);
    const float ls = logf(s);
    for (int64_t i = threadIdx.x; i < D; i += THREADS) yr[i] = (xr[i] - m) - ls;
}

// log_softmax over the last dimension
torch::Tensor log_softmax_lastdim(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension");
    auto y = torch::empty_like(x);
    if (x.numel() == 0) return y;
    const int64_t D = x.size(-1);
    const int64_t rows = x.numel() / D;
    TORCH_CHECK(rows <= 2147483647LL, "too many rows");
    auto stream = c10::cuda::getCurrentCUDAStream();
    const bool aligned = ((reinterpret_cast<uintptr_t>(x.data_ptr<float>()) | reinterpret_cast<uintptr_t>(y.data_ptr<float>())) & 15) == 0;
    if (aligned && D % 4 == 0 && D <= 8 * 4 * THREADS) {
        const int nvec = (int)(D / 4);
        if (nvec <= THREADS)
            log_softmax_rowreg_kernel<1><<<(unsigned)rows, THREADS, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), (int)D);
        else if (nvec <= 2 * THREADS)
            log_softmax_rowreg_kernel<2><<<(unsigned)rows, THREADS, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), (int)D);
        else if (nvec <= 4 * THREADS)
            log_softmax_rowreg_kernel<4><<<(unsigned)rows, THREADS, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), (int)D);
        else
            log_softmax_rowreg_kernel<8><<<(unsigned)rows, THREADS, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), (int)D);
    } else {
        log_softmax_generic_kernel<<<(unsigned)rows, THREADS, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), D);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_src = "torch::Tensor log_softmax_lastdim(torch::Tensor x);"

_ext = load_inline(
    name="kb_l1_042_log_softmax_rowreg",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["log_softmax_lastdim"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        # the reference is log_softmax over dim=1
        assert x.dim() >= 2
        if x.dim() == 2:
            return _ext.log_softmax_lastdim(x.contiguous())
        return _ext.log_softmax_lastdim(x.movedim(1, -1).contiguous()).movedim(-1, 1).contiguous()
