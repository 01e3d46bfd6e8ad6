# Custom CUDA GEMV y = A @ x (A: M x K row-major fp32, x: K x 1).
# Each warp owns 4 consecutive rows: per step every lane loads one float4 of x (read-only path,
# stays in L1/L2) and one float4 of each of the 4 rows (streaming, evict-first loads), so each x
# load is reused 4 times and every warp keeps 4-5 independent 16-byte loads in flight. Partial
# sums are reduced with warp shuffles, no shared memory or atomics. The op is bound by reading
# the 4 GiB matrix once; cuBLAS gemv is also at the bandwidth limit (~4.1 TB/s), so this is a
# parity attempt: measured ~0.97-1.0x on an H200 during authoring.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>

constexpr int ROWS_PER_WARP = 4;
constexpr int THREADS = 256;

__device__ __forceinline__ float warp_sum(float v) {
    #pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// vec: K % 4 == 0 and A, x 16-byte aligned (so every row start is 16-byte aligned).
__global__ void __launch_bounds__(THREADS) gemv_warp_rows_kernel(const float* __restrict__ A,
                                                                 const float* __restrict__ x,
                                                                 float* __restrict__ y,
                                                                 int64_t M, int64_t K, bool vec) {
    const int lane = threadIdx.x & 31;
    const int64_t warp = ((int64_t)blockIdx.x * THREADS + threadIdx.x) >> 5;
    const int64_t row0 = warp * ROWS_PER_WARP;
    if (row0 >= M) return;  // whole warp exits together

    float acc[ROWS_PER_WARP];
    #pragma unroll
    for (int r = 0; r < ROWS_PER_WARP; ++r) acc[r] = 0.0f;

    if (vec) {
        const int64_t K4 = K >> 2;
        const float4* x4 = reinterpret_cast<const float4*>(x);
        const float4* a4[ROWS_PER_WARP];
        #pragma unroll
        for (int r = 0; r < ROWS_PER_WARP; ++r) {
            // rows past M alias row0 (valid memory); their sums are never stored
            const int64_t row = (row0 + r < M) ? row0 + r : row0;
            a4[r] = reinterpret_cast<const float4*>(A + row * K);
        }
        #pragma unroll 2
        for (int64_t k = lane; k < K4; k += 32) {
            const float4 xv = __ldg(x4 + k);
            #pragma unroll
            for (int r = 0; r < ROWS_PER_WARP; ++r) {
                const float4 av = __ldcs(a4[r] + k);
                float s = acc[r];
                s = fmaf(av.x, xv.x, s);
                s = fmaf(av.y, xv.y, s);
                s = fmaf(av.z, xv.z, s);
                s = fmaf(av.w, xv.w, s);
                acc[r] = s;
            }
        }
    } else {
        for (int64_t k = lane; k < K; k += 32) {
            const float xv = __ldg(x + k);
            #pragma unroll
            for (int r = 0; r < ROWS_PER_WARP; ++r) {
                const int64_t row = (row0 + r < M) ? row0 + r : row0;
                acc[r] = fmaf(__ldg(A + row * K + k), xv, acc[r]);
            }
        }
    }

    #pragma unroll
    for (int r = 0; r < ROWS_PER_WARP; ++r) {
        const float s = warp_sum(acc[r]);
        if (lane == 0 && row0 + r < M) y[row0 + r] = s;
    }
}

torch::Tensor gemv_forward(torch::Tensor A, torch::Tensor x) {
    TORCH_CHECK(A.is_cuda() && x.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(A.is_contiguous() && x.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(A.scalar_type() == torch::kFloat32 && x.scalar_type() == torch::kFloat32, "inputs must be float32");
    TORCH_CHECK(A.dim() == 2, "A must be 2-D");
    const int64_t M = A.size(0), K = A.size(1);
    TORCH_CHECK((x.dim() == 2 && x.size(0) == K && x.size(1) == 1) || (x.dim() == 1 && x.size(0) == K),
                "x must be (K, 1) or (K,)");
    auto y = (x.dim() == 2) ? torch::empty({M, 1}, A.options()) : torch::empty({M}, A.options());
    if (M == 0) return y;
    if (K == 0) return y.zero_();
    const float* Ap = A.data_ptr<float>();
    const float* xp = x.data_ptr<float>();
    const bool vec = (K % 4 == 0) &&
                     (((reinterpret_cast<uintptr_t>(Ap) | reinterpret_cast<uintptr_t>(xp)) & 15) == 0);
    const int64_t warps = (M + ROWS_PER_WARP - 1) / ROWS_PER_WARP;
    const int64_t blocks = (warps * 32 + THREADS - 1) / THREADS;
    auto stream = c10::cuda::getCurrentCUDAStream();
    gemv_warp_rows_kernel<<<(unsigned)blocks, THREADS, 0, stream>>>(Ap, xp, y.data_ptr<float>(), M, K, vec);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_src = "torch::Tensor gemv_forward(torch::Tensor A, torch::Tensor x);"

_ext = load_inline(
    name="kb_l1_005_gemv_warp_rows",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["gemv_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, x):
        return _ext.gemv_forward(A.contiguous(), x.contiguous())
