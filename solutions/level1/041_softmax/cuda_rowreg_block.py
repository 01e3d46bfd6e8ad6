# Row softmax (rows of <= 8192 floats): one 256-thread block per row loads the row once into registers with
# float4 loads, does a block max (warp shuffles + shared memory), exponentiates in registers, does a block sum,
# and writes exp(x - max) / sum: exactly one HBM read and one write per element. Eager's block softmax is a
# single kernel too but re-reads the row for the max / sum / write passes, so expect ~1.2-1.5x.
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

// Block-wide reductions, result returned to every thread. red: THREADS/32 floats of shared memory.
__device__ __forceinline__ float block_sum(float v, float* red) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) red[wid] = v;
    __syncthreads();
    float t = (lane < THREADS / 32) ? red[lane] : 0.f;
    t = warp_sum(t);
    __syncthreads();
    return t;
}
__device__ __forceinline__ float block_max(float v, float* red) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    v = warp_max(v);
    if (lane == 0) red[wid] = v;
    __syncthreads();
    float t = (lane < THREADS / 32) ? red[lane] : -INFINITY;
    t = warp_max(t);
    __syncthreads();
    return t;
}

// VPT = float4 vectors held per thread; requires D % 4 == 0 and D/4 <= VPT*THREADS.
template <int VPT>
__global__ void __launch_bounds__(THREADS) softmax_kernel(const float* __restrict__ x, float* __restrict__ y, int D) {
    __shared__ float red[THREADS / 32];
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
            m = fmaxf(m, fmaxf(fmaxf(v[i].x, v[i].y), fmaxf(v[i].z, v[i].w)));
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
            v[i].x = expf(v[i].x - m);
            v[i].y = expf(v[i].y - m);
            v[i].z = expf(v[i].z - m);
            v[i].w = expf(v[i].w - m);
            s += (v[i].x + v[i].y) + (v[i].z + v[i].w);
        }
    }
    s = block_sum(s, red);

#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int idx = threadIdx.x + i * THREADS;
        if (idx < nvec) {
            float4 o;
            o.x = v[i].x / s;
            o.y = v[i].y / s;
            o.z = v[i].z / s;
            o.w = v[i].w / s;
            __stcs(yr + idx, o);
        }
    }
}

// softmax over the last dimension
torch::Tensor softmax_lastdim(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension");
    const int64_t D = x.size(-1);
    TORCH_CHECK(D % 4 == 0 && D > 0 && D <= 8 * 4 * THREADS, "row length must be a multiple of 4 and <= 8192");
    TORCH_CHECK((reinterpret_cast<uintptr_t>(x.data_ptr<float>()) & 15) == 0, "x must be 16-byte aligned");
    auto y = torch::empty_like(x);
    const int64_t rows = x.numel() / D;
    if (rows == 0) return y;
    TORCH_CHECK(rows <= 2147483647LL, "too many rows");
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (D <= 4 * 4 * THREADS) {
        softmax_kernel<4><<<(unsigned)rows, THREADS, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), (int)D);
    } else {
        softmax_kernel<8><<<(unsigned)rows, THREADS, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), (int)D);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_src = "torch::Tensor softmax_lastdim(torch::Tensor x);"

_ext = load_inline(
    name="kb_l1_041_softmax_rowreg",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["softmax_lastdim"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        # the reference is softmax over dim=1 of a 2-D tensor, i.e. the last dimension
        assert x.dim() == 2
        return _ext.softmax_lastdim(x.contiguous())
