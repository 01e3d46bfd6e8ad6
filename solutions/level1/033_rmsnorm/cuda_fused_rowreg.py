# Fused RMSNorm: one 256-thread block per row keeps the whole row (D <= 8192) in registers via float4 loads,
# computes sum(x^2) with a warp-shuffle + shared-memory block reduction, and writes x * (1/sqrt(mean + eps)) * w
# in the same pass. Eager runs pow, mean, add, sqrt, div, mul as ~6 kernels (~7 passes over the 1 GiB tensor);
# this is one read + one write of it, so expect ~3x.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>

constexpr int THREADS = 256;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Block-wide sum, result returned to every thread. red: THREADS/32 floats of shared memory.
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

// VPT = float4 vectors held per thread; requires D % 4 == 0 and D/4 <= VPT*THREADS.
template <int VPT>
__global__ void __launch_bounds__(THREADS) rmsnorm_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                                          float* __restrict__ y, int D, float eps) {
    __shared__ float red[THREADS / 32];
    const int nvec = D >> 2;
    const int64_t row = blockIdx.x;
    const float4* xr = reinterpret_cast<const float4*>(x + row * D);
    float4* yr = reinterpret_cast<float4*>(y + row * D);
    const float4* w4 = reinterpret_cast<const float4*>(w);

    float4 v[VPT];
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int idx = threadIdx.x + i * THREADS;
        if (idx < nvec) {
            v[i] = __ldcs(xr + idx);
            ss += v[i].x * v[i].x + v[i].y * v[i].y + v[i].z * v[i].z + v[i].w * v[i].w;
        } else {
            v[i] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
    }
    ss = block_sum(ss, red);
    const float inv = 1.0f / sqrtf(ss / (float)D + eps);
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int idx = threadIdx.x + i * THREADS;
        if (idx < nvec) {
            const float4 g = __ldg(w4 + idx);
            float4 o;
            o.x = v[i].x * inv * g.x;
            o.y = v[i].y * inv * g.y;
            o.z = v[i].z * inv * g.z;
            o.w = v[i].w * inv * g.w;
            __stcs(yr + idx, o);
        }
    }
}

torch::Tensor rmsnorm_forward(torch::Tensor x, torch::Tensor w, double eps) {
    TORCH_CHECK(x.is_cuda() && w.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(x.is_contiguous() && w.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && w.scalar_type() == torch::kFloat32, "inputs must be float32");
    TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension");
    const int64_t D = x.size(-1);
    TORCH_CHECK(w.numel() == D, "weight size must match the last dimension");
    TORCH_CHECK(D % 4 == 0 && D > 0 && D <= 8 * 4 * THREADS, "last dimension must be a multiple of 4 and <= 8192");
    TORCH_CHECK(((reinterpret_cast<uintptr_t>(x.data_ptr<float>()) | reinterpret_cast<uintptr_t>(w.data_ptr<float>())) & 15) == 0,
                "inputs must be 16-byte aligned");
    auto y = torch::empty_like(x);
    const int64_t rows = x.numel() / D;
    if (rows == 0) return y;
    TORCH_CHECK(rows <= 2147483647LL, "too many rows");
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (D <= 4 * 4 * THREADS) {
        rmsnorm_kernel<4><<<(unsigned)rows, THREADS, 0, stream>>>(x.data_ptr<float>(), w.data_ptr<float>(),
                                                                 y.data_ptr<float>(), (int)D, (float)eps);
    } else {
        rmsnorm_kernel<8><<<(unsigned)rows, THREADS, 0, stream>>>(x.data_ptr<float>(), w.data_ptr<float>(),
                                                                 y.data_ptr<float>(), (int)D, (float)eps);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_src = "torch::Tensor rmsnorm_forward(torch::Tensor x, torch::Tensor w, double eps);"

_ext = load_inline(
    name="kb_l1_033_rmsnorm_fused",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["rmsnorm_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.eps = eps

    def forward(self, x):
        return _ext.rmsnorm_forward(x.contiguous(), self.weight.contiguous(), float(self.eps))
