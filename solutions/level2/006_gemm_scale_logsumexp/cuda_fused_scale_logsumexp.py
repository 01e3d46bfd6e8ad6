# Keeps the GEMM (+ bias) in cuBLAS via F.linear with the module's own weights, then fuses scale + logsumexp
# into ONE row-reduction kernel: one block per row streams the 8192 logits once with float4 loads, keeping an
# online (running max, rescaled sum) pair per thread, merged with warp shuffles and shared memory.
# Eager PyTorch materializes x*scale (read+write 512 MB), then logsumexp runs amax (read), x-max (read+write),
# exp_ (read+write) and sum (read): ~7 passes over the activation versus 1 here.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor scale_logsumexp_rows(torch::Tensor y, double scale);"

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>
#include <math_constants.h>

__device__ __forceinline__ void lse_push(float& m, float& s, float v) {
    if (v > m) { s = s * expf(m - v) + 1.0f; m = v; }
    else       { s += expf(v - m); }
}

__device__ __forceinline__ void lse_merge(float& m, float& s, float m2, float s2) {
    float M = fmaxf(m, m2);
    if (M == -CUDART_INF_F) { m = M; s = 0.0f; return; }
    s = s * expf(m - M) + s2 * expf(m2 - M);
    m = M;
}

template <bool VEC>
__global__ void scale_lse_kernel(const float* __restrict__ y, float* __restrict__ out, int cols, float scale) {
    const int row = blockIdx.x;
    const float* r = y + (size_t)row * cols;
    float m = -CUDART_INF_F, s = 0.0f;
    if (VEC) {
        const float4* r4 = reinterpret_cast<const float4*>(r);
        const int cols4 = cols >> 2;
        for (int j = threadIdx.x; j < cols4; j += blockDim.x) {
            float4 v = r4[j];
            lse_push(m, s, v.x * scale);
            lse_push(m, s, v.y * scale);
            lse_push(m, s, v.z * scale);
            lse_push(m, s, v.w * scale);
        }
    } else {
        for (int j = threadIdx.x; j < cols; j += blockDim.x) lse_push(m, s, r[j] * scale);
    }
    // warp reduction of (m, s)
    for (int off = 16; off > 0; off >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        lse_merge(m, s, m2, s2);
    }
    __shared__ float sm[32], ss[32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nwarps = (blockDim.x + 31) >> 5;
    if (lane == 0) { sm[warp] = m; ss[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        m = (lane < nwarps) ? sm[lane] : -CUDART_INF_F;
        s = (lane < nwarps) ? ss[lane] : 0.0f;
        for (int off = 16; off > 0; off >>= 1) {
            float m2 = __shfl_xor_sync(0xffffffffu, m, off);
            float s2 = __shfl_xor_sync(0xffffffffu, s, off);
            lse_merge(m, s, m2, s2);
        }
        if (lane == 0) out[row] = m + logf(s);
    }
}

torch::Tensor scale_logsumexp_rows(torch::Tensor y, double scale) {
    TORCH_CHECK(y.is_cuda(), "input must be a CUDA tensor");
    TORCH_CHECK(y.is_contiguous(), "input must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32, "input must be float32");
    TORCH_CHECK(y.dim() == 2, "input must be 2-D");
    const int rows = (int)y.size(0), cols = (int)y.size(1);
    auto out = torch::empty({rows, 1}, y.options());
    if (rows == 0) return out;
    TORCH_CHECK(cols > 0, "empty rows");
    const int threads = 256;
    auto stream = c10::cuda::getCurrentCUDAStream();
    bool vec = (cols % 4 == 0) && (reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0);
    if (vec)
        scale_lse_kernel<true><<<rows, threads, 0, stream>>>(y.data_ptr<float>(), out.data_ptr<float>(), cols, (float)scale);
    else
        scale_lse_kernel<false><<<rows, threads, 0, stream>>>(y.data_ptr<float>(), out.data_ptr<float>(), cols, (float)scale);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(name="kb_l2_006_scale_logsumexp", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["scale_logsumexp_rows"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        y = F.linear(x.contiguous(), self.linear.weight, self.linear.bias)  # cuBLAS GEMM
        return _ext.scale_logsumexp_rows(y, float(self.scaling_factor))
