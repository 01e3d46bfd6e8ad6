# Keeps the GEMM (+ its bias) in cuBLAS via F.linear with the module's own weights, then fuses LayerNorm (row
# mean, biased variance, rsqrt, affine), the residual add and the multiply into ONE CUDA kernel: a block per row
# stages the GEMM row in shared memory (one float4 read), reduces mean and the centered sum of squares from it
# (two-pass, as accurate as PyTorch's Welford), then writes (ln + y) * y in place over the GEMM's fresh output.
# Eager PyTorch runs LayerNorm, add and mul as three kernels over the 8192x8192 activation (256 MB each),
# reading about 5 and writing 3 such tensors; the fused kernel reads 2 (the GEMM row and y) and writes 1.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = ("torch::Tensor layernorm_residual_mul_(torch::Tensor h, torch::Tensor y, torch::Tensor gamma, "
           "torch::Tensor beta, double eps);")

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>

__device__ __forceinline__ float warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

__device__ __forceinline__ float block_sum(float v, float* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float t = lane < nw ? red[lane] : 0.0f;
        t = warp_sum(t);
        if (lane == 0) red[0] = t;
    }
    __syncthreads();
    return red[0];
}

__device__ __forceinline__ float epi(float v, float mean, float rstd, float g, float be, float r) {
    const float ln = (v - mean) * rstd * g + be;  // LayerNorm
    return (ln + r) * r;                           // x = x + y; x = x * y
}

// One block per row of h (grid-stride). buf is shared memory when the row fits, else the row of h itself.
template <bool VEC>
__global__ void ln_res_mul_kernel(float* h, const float* __restrict__ y, const float* __restrict__ gamma,
                                  const float* __restrict__ beta, long long rows, int cols, float eps, bool use_smem) {
    extern __shared__ float4 smem4[];
    __shared__ float red[32];
    const float inv_cols = 1.0f / (float)cols;
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        float* row = h + (size_t)r * cols;
        const float* yrow = y + (size_t)r * cols;
        float* buf = use_smem ? reinterpret_cast<float*>(smem4) : row;
        float sum = 0.0f;
        if (VEC) {
            const int c4 = cols >> 2;
            const float4* r4 = reinterpret_cast<const float4*>(row);
            float4* b4 = reinterpret_cast<float4*>(buf);
            for (int j = threadIdx.x; j < c4; j += blockDim.x) {
                const float4 v = r4[j];
                if (use_smem) b4[j] = v;
                sum += (v.x + v.y) + (v.z + v.w);
            }
        } else {
            for (int j = threadIdx.x; j < cols; j += blockDim.x) {
                const float v = row[j];
                if (use_smem) buf[j] = v;
                sum += v;
            }
        }
        const float mean = block_sum(sum, red) * inv_cols;
        float sq = 0.0f;
        if (VEC) {
            const int c4 = cols >> 2;
            const float4* b4 = reinterpret_cast<const float4*>(buf);
            for (int j = threadIdx.x; j < c4; j += blockDim.x) {
                const float4 v = b4[j];
                const float a = v.x - mean, b = v.y - mean, c = v.z - mean, d = v.w - mean;
                sq += (a * a + b * b) + (c * c + d * d);
            }
        } else {
            for (int j = threadIdx.x; j < cols; j += blockDim.x) {
                const float a = buf[j] - mean;
                sq += a * a;
            }
        }
        const float var = block_sum(sq, red) * inv_cols;  // biased variance
        const float rstd = rsqrtf(var + eps);
        if (VEC) {
            const int c4 = cols >> 2;
            const float4* b4 = reinterpret_cast<const float4*>(buf);
            const float4* y4 = reinterpret_cast<const float4*>(yrow);
            const float4* g4 = reinterpret_cast<const float4*>(gamma);
            const float4* be4 = reinterpret_cast<const float4*>(beta);
            float4* o4 = reinterpret_cast<float4*>(row);
            for (int j = threadIdx.x; j < c4; j += blockDim.x) {
                const float4 v = b4[j], rr = __ldg(&y4[j]), g = __ldg(&g4[j]), be = __ldg(&be4[j]);
                float4 o;
                o.x = epi(v.x, mean, rstd, g.x, be.x, rr.x);
                o.y = epi(v.y, mean, rstd, g.y, be.y, rr.y);
                o.z = epi(v.z, mean, rstd, g.z, be.z, rr.z);
                o.w = epi(v.w, mean, rstd, g.w, be.w, rr.w);
                o4[j] = o;
            }
        } else {
            for (int j = threadIdx.x; j < cols; j += blockDim.x)
                row[j] = epi(buf[j], mean, rstd, __ldg(&gamma[j]), __ldg(&beta[j]), __ldg(&yrow[j]));
        }
    }
}

torch::Tensor layernorm_residual_mul_(torch::Tensor h, torch::Tensor y, torch::Tensor gamma, torch::Tensor beta,
                                      double eps) {
    TORCH_CHECK(h.is_cuda() && y.is_cuda() && gamma.is_cuda() && beta.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(h.is_contiguous() && y.is_contiguous() && gamma.is_contiguous() && beta.is_contiguous(),
                "inputs must be contiguous");
    TORCH_CHECK(h.scalar_type() == torch::kFloat32 && y.scalar_type() == torch::kFloat32 &&
                gamma.scalar_type() == torch::kFloat32 && beta.scalar_type() == torch::kFloat32,
                "inputs must be float32");
    TORCH_CHECK(h.dim() == 2 && h.sizes() == y.sizes(), "h (GEMM output) and y must both be (rows, features)");
    TORCH_CHECK(h.data_ptr<float>() != y.data_ptr<float>(), "h must not alias y");
    const long long rows = h.size(0);
    const int cols = (int)h.size(1);
    TORCH_CHECK(gamma.numel() == cols && beta.numel() == cols, "LayerNorm weight/bias size mismatch");
    if (h.numel() == 0) return h;
    auto al = [](const torch::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr<float>()) % 16 == 0; };
    const bool vec = (cols % 4 == 0) && al(h) && al(y) && al(gamma) && al(beta);
    const size_t smem = (size_t)cols * sizeof(float);
    const bool use_smem = smem <= 40 * 1024;  // under the 48 KB default; larger rows re-read the row from global
    const int threads = cols >= 2048 ? 512 : 256;
    const unsigned blocks = (unsigned)std::min<long long>(rows, 1LL << 20);
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (vec)
        ln_res_mul_kernel<true><<<blocks, threads, use_smem ? smem : 0, stream>>>(
            h.data_ptr<float>(), y.data_ptr<float>(), gamma.data_ptr<float>(), beta.data_ptr<float>(), rows, cols,
            (float)eps, use_smem);
    else
        ln_res_mul_kernel<false><<<blocks, threads, use_smem ? smem : 0, stream>>>(
            h.data_ptr<float>(), y.data_ptr<float>(), gamma.data_ptr<float>(), beta.data_ptr<float>(), rows, cols,
            (float)eps, use_smem);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return h;
}
"""

_ext = load_inline(name="kb_l2_013_ln_residual_mul_c2", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["layernorm_residual_mul_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.layer_norm = nn.LayerNorm(out_features)

    def forward(self, x, y):
        h = F.linear(x.contiguous(), self.linear.weight, self.linear.bias)  # cuBLAS GEMM, fresh output
        ln = self.layer_norm
        return _ext.layernorm_residual_mul_(h.contiguous(), y.contiguous(), ln.weight.contiguous(),
                                            ln.bias.contiguous(), float(ln.eps))
