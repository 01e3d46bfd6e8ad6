# Keeps the convolution in cuDNN (F.conv2d with the module's own weight and bias), then fuses exact GELU and the
# global average pool into ONE CUDA kernel: a block per (n, c) plane streams the plane once with float4 loads,
# applies GELU in registers and reduces the sum (warp shuffles), writing one mean per plane straight into the
# (N, C) output. Eager PyTorch writes the GELU output (128x64x126x126, 520 MB) and reads it back for the mean;
# here only the single 520 MB read and a 32 KB write remain.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor gelu_plane_mean(torch::Tensor y);"

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

__device__ __forceinline__ float gelu(float x) {  // F.gelu (approximate='none'), PyTorch's operation order
    return x * 0.5f * (1.0f + erff(x * 0.70710678118654752440f));
}

// One block per plane (grid-stride). adaptive_avg_pool2d(x, 1) is x.mean((-2, -1)): sum times (1 / HW).
template <bool VEC>
__global__ void gelu_plane_mean_kernel(const float* __restrict__ y, float* __restrict__ out, long long planes,
                                       long long HW, float factor) {
    __shared__ float red[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    for (long long p = blockIdx.x; p < planes; p += gridDim.x) {
        const float* src = y + (size_t)p * HW;
        float s = 0.0f;
        if (VEC) {
            const float4* s4 = reinterpret_cast<const float4*>(src);
            for (long long j = threadIdx.x; j < (HW >> 2); j += blockDim.x) {
                const float4 v = __ldg(&s4[j]);
                s += (gelu(v.x) + gelu(v.y)) + (gelu(v.z) + gelu(v.w));
            }
        } else {
            for (long long j = threadIdx.x; j < HW; j += blockDim.x) s += gelu(__ldg(&src[j]));
        }
        s = warp_sum(s);
        if (lane == 0) red[warp] = s;
        __syncthreads();
        if (warp == 0) {
            float t = lane < nw ? red[lane] : 0.0f;
            t = warp_sum(t);
            if (lane == 0) out[p] = t * factor;
        }
        __syncthreads();  // red is reused by the next plane
    }
}

torch::Tensor gelu_plane_mean(torch::Tensor y) {
    TORCH_CHECK(y.is_cuda(), "y must be a CUDA tensor");
    TORCH_CHECK(y.is_contiguous(), "y must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32, "y must be float32");
    TORCH_CHECK(y.dim() == 4, "y must be (N, C, H, W)");
    const long long N = y.size(0), C = y.size(1);
    const long long planes = N * C;
    const long long HW = y.size(2) * y.size(3);
    auto out = torch::empty({N, C}, y.options());
    if (planes == 0) return out;
    TORCH_CHECK(HW > 0, "empty spatial size");
    const bool vec = (HW % 4 == 0) && (reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0);
    const int threads = 512;
    const unsigned blocks = (unsigned)std::min<long long>(planes, 1LL << 20);
    const float factor = (float)planes / (float)(planes * HW);  // MeanOps' factor, as ATen's mean computes it
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (vec)
        gelu_plane_mean_kernel<true><<<blocks, threads, 0, stream>>>(y.data_ptr<float>(), out.data_ptr<float>(), planes, HW, factor);
    else
        gelu_plane_mean_kernel<false><<<blocks, threads, 0, stream>>>(y.data_ptr<float>(), out.data_ptr<float>(), planes, HW, factor);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(name="kb_l2_023_gelu_plane_mean_c2", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["gelu_plane_mean"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        c = self.conv
        y = F.conv2d(x.contiguous(), c.weight, c.bias, c.stride, c.padding, c.dilation, c.groups)  # cuDNN, fresh
        return _ext.gelu_plane_mean(y.contiguous())
