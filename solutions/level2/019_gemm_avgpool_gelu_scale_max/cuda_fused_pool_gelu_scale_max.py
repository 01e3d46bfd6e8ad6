# Keeps the GEMM (+ its bias) in cuBLAS via F.linear with the module's own weights, then fuses AvgPool1d,
# exact GELU, the scalar multiply and the row max into ONE CUDA kernel: a block per row reads the GEMM row once
# (one float4 per pooling window when kernel = stride = 4), averages each window, applies GELU and the scale in
# registers and reduces the max, writing one value per row. Eager PyTorch reads the 16384x4096 activation
# (256 MB) in the pool, then writes and re-reads the 64 MB pooled tensor three times (gelu, mul, max); here only
# the 256 MB read and a 64 KB write remain.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor pool_gelu_scale_max(torch::Tensor y, int64_t kernel, int64_t stride, double scale);"

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>

__device__ __forceinline__ float warp_max(float v) {
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

__device__ __forceinline__ float gelu(float x) {  // F.gelu (approximate='none'), PyTorch's operation order
    return x * 0.5f * (1.0f + erff(x * 0.70710678118654752440f));
}

// One block per row (grid-stride over rows); thread t handles pooled outputs t, t + blockDim.x, ...
// AvgPool1d (no padding, floor mode): window p covers [p*stride, p*stride + kernel); the sum starts at 0 and
// adds the window in order, then divides by the kernel size, as PyTorch's avg_pool2d kernel does.
template <bool VEC4>
__global__ void pool_gelu_scale_max_kernel(const float* __restrict__ y, float* __restrict__ out, long long rows,
                                           int cols, int kernel, int stride, int pooled, float scale) {
    __shared__ float red[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    const float kdiv = (float)kernel;
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* row = y + (size_t)r * cols;
        float m = -INFINITY;
        for (int p = threadIdx.x; p < pooled; p += blockDim.x) {
            float s = 0.0f;
            if (VEC4) {
                const float4 v = __ldg(reinterpret_cast<const float4*>(row) + p);
                s = s + v.x; s = s + v.y; s = s + v.z; s = s + v.w;
            } else {
                const float* w = row + (size_t)p * stride;
                for (int k = 0; k < kernel; ++k) s = s + __ldg(&w[k]);
            }
            const float a = s / kdiv;
            m = fmaxf(m, gelu(a) * scale);
        }
        m = warp_max(m);
        if (lane == 0) red[warp] = m;
        __syncthreads();
        if (warp == 0) {
            float t = lane < nw ? red[lane] : -INFINITY;
            t = warp_max(t);
            if (lane == 0) out[r] = t;
        }
        __syncthreads();  // red is reused by the next row
    }
}

torch::Tensor pool_gelu_scale_max(torch::Tensor y, int64_t kernel, int64_t stride, double scale) {
    TORCH_CHECK(y.is_cuda(), "y must be a CUDA tensor");
    TORCH_CHECK(y.is_contiguous(), "y must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32, "y must be float32");
    TORCH_CHECK(y.dim() == 2, "y must be (rows, features)");
    TORCH_CHECK(kernel >= 1 && stride >= 1, "bad pooling parameters");
    const long long rows = y.size(0);
    const int cols = (int)y.size(1);
    TORCH_CHECK(cols >= kernel, "AvgPool1d: input shorter than the kernel");
    const int pooled = (int)((cols - kernel) / stride + 1);
    auto out = torch::empty({rows}, y.options());
    if (rows == 0) return out;
    const bool vec4 = kernel == 4 && stride == 4 && (reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0) &&
                      (cols % 4 == 0);
    const int threads = pooled >= 1024 ? 256 : 128;
    const unsigned blocks = (unsigned)std::min<long long>(rows, 1LL << 20);
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (vec4)
        pool_gelu_scale_max_kernel<true><<<blocks, threads, 0, stream>>>(
            y.data_ptr<float>(), out.data_ptr<float>(), rows, cols, (int)kernel, (int)stride, pooled, (float)scale);
    else
        pool_gelu_scale_max_kernel<false><<<blocks, threads, 0, stream>>>(
            y.data_ptr<float>(), out.data_ptr<float>(), rows, cols, (int)kernel, (int)stride, pooled, (float)scale);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(name="kb_l2_019_pool_gelu_scale_max_c2", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["pool_gelu_scale_max"], extra_cuda_cflags=["-O3"], verbose=False)


def _one(v):
    return int(v[0]) if isinstance(v, (tuple, list)) else int(v)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, pool_kernel_size, scale_factor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.avg_pool = nn.AvgPool1d(kernel_size=pool_kernel_size)
        self.scale_factor = scale_factor

    def forward(self, x):
        y = F.linear(x.contiguous(), self.linear.weight, self.linear.bias)  # cuBLAS GEMM, fresh output
        p = self.avg_pool
        if _one(p.padding) != 0 or p.ceil_mode:
            raise NotImplementedError("fused kernel covers AvgPool1d without padding in floor mode")
        return _ext.pool_gelu_scale_max(y.contiguous(), _one(p.kernel_size), _one(p.stride), float(self.scale_factor))
