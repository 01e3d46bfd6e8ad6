# Keeps the GEMM (+ its bias) in cuBLAS via F.linear with the module's own weights, then fuses exact GELU and
# the row softmax into ONE CUDA kernel: a block per row reads the GEMM row once (float4), applies GELU while
# staging it in shared memory, reduces the row max, exponentiates in shared memory while reducing the sum, and
# writes exp / sum in place over the GEMM's fresh output. Eager PyTorch writes the GELU output (128 MB for
# 32768x1024), reads it back for the softmax and writes a third tensor; here the activation is read once and
# written once.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor gelu_softmax_(torch::Tensor y);"

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
__device__ __forceinline__ float warp_max(float v) {
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

// Block-wide reductions broadcast to every thread; `red` is a shared float[32].
template <bool MAX>
__device__ __forceinline__ float block_reduce(float v, float* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = MAX ? warp_max(v) : warp_sum(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float t = lane < nw ? red[lane] : (MAX ? -INFINITY : 0.0f);
        t = MAX ? warp_max(t) : warp_sum(t);
        if (lane == 0) red[0] = t;
    }
    __syncthreads();
    return red[0];
}

__device__ __forceinline__ float gelu(float x) {  // F.gelu (approximate='none'), PyTorch's operation order
    return x * 0.5f * (1.0f + erff(x * 0.70710678118654752440f));
}

// One block per row (grid-stride). buf is shared memory when the row fits, else the row itself in global memory;
// every thread only touches its own columns in buf.
template <bool VEC>
__global__ void gelu_softmax_kernel(float* y, long long rows, int cols, bool use_smem) {
    extern __shared__ float4 smem4[];
    __shared__ float red[32];
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        float* row = y + (size_t)r * cols;
        float* buf = use_smem ? reinterpret_cast<float*>(smem4) : row;
        float m = -INFINITY;
        if (VEC) {
            const int c4 = cols >> 2;
            const float4* r4 = reinterpret_cast<const float4*>(row);
            float4* b4 = reinterpret_cast<float4*>(buf);
            for (int j = threadIdx.x; j < c4; j += blockDim.x) {
                float4 v = r4[j];
                v.x = gelu(v.x); v.y = gelu(v.y); v.z = gelu(v.z); v.w = gelu(v.w);
                b4[j] = v;
                m = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
            }
        } else {
            for (int j = threadIdx.x; j < cols; j += blockDim.x) {
                const float v = gelu(row[j]);
                buf[j] = v;
                m = fmaxf(m, v);
            }
        }
        const float mx = block_reduce<true>(m, red);
        float s = 0.0f;
        if (VEC) {
            const int c4 = cols >> 2;
            float4* b4 = reinterpret_cast<float4*>(buf);
            for (int j = threadIdx.x; j < c4; j += blockDim.x) {
                float4 v = b4[j];
                v.x = expf(v.x - mx); v.y = expf(v.y - mx); v.z = expf(v.z - mx); v.w = expf(v.w - mx);
                b4[j] = v;
                s += (v.x + v.y) + (v.z + v.w);
            }
        } else {
            for (int j = threadIdx.x; j < cols; j += blockDim.x) {
                const float e = expf(buf[j] - mx);
                buf[j] = e;
                s += e;
            }
        }
        const float sum = block_reduce<false>(s, red);
        if (VEC) {
            const int c4 = cols >> 2;
            const float4* b4 = reinterpret_cast<const float4*>(buf);
            float4* o4 = reinterpret_cast<float4*>(row);
            for (int j = threadIdx.x; j < c4; j += blockDim.x) {
                float4 v = b4[j];
                v.x = v.x / sum; v.y = v.y / sum; v.z = v.z / sum; v.w = v.w / sum;
                o4[j] = v;
            }
        } else {
            for (int j = threadIdx.x; j < cols; j += blockDim.x) row[j] = buf[j] / sum;
        }
    }
}

torch::Tensor gelu_softmax_(torch::Tensor y) {
    TORCH_CHECK(y.is_cuda(), "y must be a CUDA tensor");
    TORCH_CHECK(y.is_contiguous(), "y must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32, "y must be float32");
    TORCH_CHECK(y.dim() == 2, "y must be (rows, features)");
    const long long rows = y.size(0);
    const int cols = (int)y.size(1);
    if (y.numel() == 0) return y;
    const bool vec = (cols % 4 == 0) && (reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0);
    const size_t smem = (size_t)cols * sizeof(float);
    const bool use_smem = smem <= 40 * 1024;
    const int work = vec ? cols / 4 : cols;
    const int threads = work >= 512 ? 512 : (work >= 256 ? 256 : 128);
    const unsigned blocks = (unsigned)std::min<long long>(rows, 1LL << 20);
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (vec)
        gelu_softmax_kernel<true><<<blocks, threads, use_smem ? smem : 0, stream>>>(y.data_ptr<float>(), rows, cols, use_smem);
    else
        gelu_softmax_kernel<false><<<blocks, threads, use_smem ? smem : 0, stream>>>(y.data_ptr<float>(), rows, cols, use_smem);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(name="kb_l2_016_gelu_softmax_c2", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["gelu_softmax_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = F.linear(x.contiguous(), self.linear.weight, self.linear.bias)  # cuBLAS GEMM, fresh output
        return _ext.gelu_softmax_(y.contiguous())
