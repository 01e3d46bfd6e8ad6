# Keeps the GEMM (+ its bias) in cuBLAS via F.linear with the module's own weights, then fuses exact GELU and
# the whole LayerNorm (row mean, biased variance, rsqrt, affine) into ONE CUDA kernel: a block per row loads the
# row once (float4), applies GELU while staging it in shared memory, reduces mean and then the centered sum of
# squares from shared memory (two-pass, as accurate as PyTorch's Welford), and writes the normalized row in
# place over the GEMM's fresh output. Eager PyTorch writes the GELU output (256 MB for 16384x4096) and reads it
# back in LayerNorm; here the activation is read once and written once.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor gelu_layernorm_(torch::Tensor y, torch::Tensor gamma, torch::Tensor beta, double eps);"

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

// Block-wide sum broadcast to every thread; `red` is a shared float[32]. The leading barrier lets a call reuse
// `red` right after the previous call's readers.
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

__device__ __forceinline__ float gelu(float x) {  // F.gelu (approximate='none'), PyTorch's operation order
    return x * 0.5f * (1.0f + erff(x * 0.70710678118654752440f));
}

// One block per row (grid-stride over rows). buf is shared memory when the row fits, else the row itself in
// global memory (the GEMM output is ours to overwrite); every thread only touches its own columns in buf.
template <bool VEC>
__global__ void gelu_layernorm_kernel(float* y, const float* __restrict__ gamma, const float* __restrict__ beta,
                                      long long rows, int cols, float eps, bool use_smem) {
    extern __shared__ float4 smem4[];
    __shared__ float red[32];
    const float inv_cols = 1.0f / (float)cols;
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        float* row = y + (size_t)r * cols;
        float* buf = use_smem ? reinterpret_cast<float*>(smem4) : row;
        float sum = 0.0f;
        if (VEC) {
            const int c4 = cols >> 2;
            const float4* r4 = reinterpret_cast<const float4*>(row);
            float4* b4 = reinterpret_cast<float4*>(buf);
            for (int j = threadIdx.x; j < c4; j += blockDim.x) {
                float4 v = r4[j];
                v.x = gelu(v.x); v.y = gelu(v.y); v.z = gelu(v.z); v.w = gelu(v.w);
                b4[j] = v;
                sum += (v.x + v.y) + (v.z + v.w);
            }
        } else {
            for (int j = threadIdx.x; j < cols; j += blockDim.x) {
                const float v = gelu(row[j]);
                buf[j] = v;
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
        const float var = block_sum(sq, red) * inv_cols;  // biased variance, as LayerNorm uses
        const float rstd = rsqrtf(var + eps);
        if (VEC) {
            const int c4 = cols >> 2;
            const float4* b4 = reinterpret_cast<const float4*>(buf);
            const float4* g4 = reinterpret_cast<const float4*>(gamma);
            const float4* be4 = reinterpret_cast<const float4*>(beta);
            float4* o4 = reinterpret_cast<float4*>(row);
            for (int j = threadIdx.x; j < c4; j += blockDim.x) {
                const float4 v = b4[j], g = __ldg(&g4[j]), be = __ldg(&be4[j]);
                float4 o;
                o.x = (v.x - mean) * rstd * g.x + be.x;
                o.y = (v.y - mean) * rstd * g.y + be.y;
                o.z = (v.z - mean) * rstd * g.z + be.z;
                o.w = (v.w - mean) * rstd * g.w + be.w;
                o4[j] = o;
            }
        } else {
            for (int j = threadIdx.x; j < cols; j += blockDim.x)
                row[j] = (buf[j] - mean) * rstd * __ldg(&gamma[j]) + __ldg(&beta[j]);
        }
    }
}

torch::Tensor gelu_layernorm_(torch::Tensor y, torch::Tensor gamma, torch::Tensor beta, double eps) {
    TORCH_CHECK(y.is_cuda() && gamma.is_cuda() && beta.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(y.is_contiguous() && gamma.is_contiguous() && beta.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32 && gamma.scalar_type() == torch::kFloat32 &&
                beta.scalar_type() == torch::kFloat32, "inputs must be float32");
    TORCH_CHECK(y.dim() == 2, "y must be (rows, features)");
    const long long rows = y.size(0);
    const int cols = (int)y.size(1);
    TORCH_CHECK(gamma.numel() == cols && beta.numel() == cols, "LayerNorm weight/bias size mismatch");
    if (y.numel() == 0) return y;
    const bool vec = (cols % 4 == 0) && (reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0) &&
                     (reinterpret_cast<uintptr_t>(gamma.data_ptr<float>()) % 16 == 0) &&
                     (reinterpret_cast<uintptr_t>(beta.data_ptr<float>()) % 16 == 0);
    const size_t smem = (size_t)cols * sizeof(float);
    const bool use_smem = smem <= 40 * 1024;  // under the 48 KB default; larger rows use the global row as buffer
    const int threads = cols >= 2048 ? 512 : 256;
    const unsigned blocks = (unsigned)std::min<long long>(rows, 1LL << 20);
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (vec)
        gelu_layernorm_kernel<true><<<blocks, threads, use_smem ? smem : 0, stream>>>(
            y.data_ptr<float>(), gamma.data_ptr<float>(), beta.data_ptr<float>(), rows, cols, (float)eps, use_smem);
    else
        gelu_layernorm_kernel<false><<<blocks, threads, use_smem ? smem : 0, stream>>>(
            y.data_ptr<float>(), gamma.data_ptr<float>(), beta.data_ptr<float>(), rows, cols, (float)eps, use_smem);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(name="kb_l2_002_gelu_layernorm_c2", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["gelu_layernorm_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.layer_norm = nn.LayerNorm(out_features)

    def forward(self, x):
        y = F.linear(x.contiguous(), self.linear.weight, self.linear.bias)  # cuBLAS GEMM, fresh output
        ln = self.layer_norm
        return _ext.gelu_layernorm_(y.contiguous(), ln.weight.contiguous(), ln.bias.contiguous(), float(ln.eps))
