# Keeps the convolution in cuDNN (F.conv2d with the module's own weight and bias), then fuses InstanceNorm2d
# (per (n, c) plane: mean, biased variance; affine only if the module has it) and LeakyReLU into ONE CUDA kernel:
# a block per plane loads the plane once with float4 loads into shared memory (126 x 126 x 4 B = 62 KB, opt-in
# dynamic shared memory), reduces the mean and then the centered sum of squares from shared memory (two-pass,
# as accurate as Welford), and writes leaky_relu((x - mean) * invstd) in place over the conv's fresh output.
# Eager PyTorch reads the 128x64x126x126 activation (520 MB) for the statistics, reads and writes it to
# normalize, then reads and writes it again for LeakyReLU; here it is read once and written once.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = ("torch::Tensor instancenorm_leaky_(torch::Tensor y, torch::Tensor weight, torch::Tensor bias, double eps, "
           "double slope);")

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
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

// One block per (n, c) plane (grid-stride). buf is shared memory when the plane fits, else the plane itself in
// global memory (each thread touches only its own elements of buf, so the final in-place write is safe).
template <bool VEC>
__global__ void instancenorm_leaky_kernel(float* y, const float* __restrict__ weight, const float* __restrict__ bias,
                                          long long planes, int C, long long HW, float eps, float slope, bool use_smem) {
    extern __shared__ float4 smem4[];
    __shared__ float red[32];
    const float inv_hw = 1.0f / (float)HW;
    for (long long p = blockIdx.x; p < planes; p += gridDim.x) {
        float* plane = y + (size_t)p * HW;
        float* buf = use_smem ? reinterpret_cast<float*>(smem4) : plane;
        float s = 0.0f;
        if (VEC) {
            const float4* p4 = reinterpret_cast<const float4*>(plane);
            float4* b4 = reinterpret_cast<float4*>(buf);
            for (long long j = threadIdx.x; j < (HW >> 2); j += blockDim.x) {
                const float4 v = p4[j];
                if (use_smem) b4[j] = v;
                s += (v.x + v.y) + (v.z + v.w);
            }
        } else {
            for (long long j = threadIdx.x; j < HW; j += blockDim.x) {
                const float v = plane[j];
                if (use_smem) buf[j] = v;
                s += v;
            }
        }
        const float mean = block_sum(s, red) * inv_hw;
        float q = 0.0f;
        if (VEC) {
            const float4* b4 = reinterpret_cast<const float4*>(buf);
            for (long long j = threadIdx.x; j < (HW >> 2); j += blockDim.x) {
                const float4 v = b4[j];
                const float a = v.x - mean, b = v.y - mean, c = v.z - mean, d = v.w - mean;
                q += (a * a + b * b) + (c * c + d * d);
            }
        } else {
            for (long long j = threadIdx.x; j < HW; j += blockDim.x) {
                const float a = buf[j] - mean;
                q += a * a;
            }
        }
        const float var = block_sum(q, red) * inv_hw;  // biased variance
        const float invstd = 1.0f / sqrtf(var + eps);
        const int c = (int)(p % C);
        const float w = weight != nullptr ? __ldg(&weight[c]) : 1.0f;
        const float b = bias != nullptr ? __ldg(&bias[c]) : 0.0f;
        const bool affine = weight != nullptr;
        auto f = [&](float x) {
            float v = (x - mean) * invstd;
            if (affine) v = v * w + b;
            return v > 0.0f ? v : v * slope;  // F.leaky_relu
        };
        if (VEC) {
            const float4* b4 = reinterpret_cast<const float4*>(buf);
            float4* o4 = reinterpret_cast<float4*>(plane);
            for (long long j = threadIdx.x; j < (HW >> 2); j += blockDim.x) {
                float4 v = b4[j];
                v.x = f(v.x); v.y = f(v.y); v.z = f(v.z); v.w = f(v.w);
                o4[j] = v;
            }
        } else {
            for (long long j = threadIdx.x; j < HW; j += blockDim.x) plane[j] = f(buf[j]);
        }
    }
}

torch::Tensor instancenorm_leaky_(torch::Tensor y, torch::Tensor weight, torch::Tensor bias, double eps, double slope) {
    TORCH_CHECK(y.is_cuda(), "y must be a CUDA tensor");
    TORCH_CHECK(y.is_contiguous(), "y must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32, "y must be float32");
    TORCH_CHECK(y.dim() >= 3, "y must be (N, C, spatial...)");
    const long long N = y.size(0), C = y.size(1);
    const bool affine = weight.numel() > 0;
    if (affine) {
        TORCH_CHECK(weight.is_cuda() && bias.is_cuda() && weight.is_contiguous() && bias.is_contiguous() &&
                    weight.scalar_type() == torch::kFloat32 && bias.scalar_type() == torch::kFloat32,
                    "affine parameters must be contiguous float32 CUDA tensors");
        TORCH_CHECK(weight.numel() == C && bias.numel() == C, "affine parameter size mismatch");
    }
    if (y.numel() == 0) return y;
    const long long planes = N * C;
    const long long HW = y.numel() / planes;
    const bool vec = (HW % 4 == 0) && (reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0);
    const size_t smem = (size_t)HW * sizeof(float);
    const size_t optin = at::cuda::getCurrentDeviceProperties()->sharedMemPerBlockOptin;
    const size_t limit = std::min<size_t>(optin > 2048 ? optin - 2048 : 0, 100 * 1024);
    const bool use_smem = smem <= limit;
    const size_t dyn = use_smem ? smem : 0;
    const int threads = 512;
    const unsigned blocks = (unsigned)std::min<long long>(planes, 1LL << 20);
    auto stream = c10::cuda::getCurrentCUDAStream();
    const float* wp = affine ? weight.data_ptr<float>() : nullptr;
    const float* bp = affine ? bias.data_ptr<float>() : nullptr;
    if (vec) {
        C10_CUDA_CHECK(cudaFuncSetAttribute(instancenorm_leaky_kernel<true>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn));
        instancenorm_leaky_kernel<true><<<blocks, threads, dyn, stream>>>(y.data_ptr<float>(), wp, bp, planes, (int)C,
                                                                         HW, (float)eps, (float)slope, use_smem);
    } else {
        C10_CUDA_CHECK(cudaFuncSetAttribute(instancenorm_leaky_kernel<false>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn));
        instancenorm_leaky_kernel<false><<<blocks, threads, dyn, stream>>>(y.data_ptr<float>(), wp, bp, planes, (int)C,
                                                                          HW, (float)eps, (float)slope, use_smem);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(name="kb_l2_022_instancenorm_leaky_c2", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["instancenorm_leaky_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, negative_slope):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.instance_norm = nn.InstanceNorm2d(out_channels)
        self.negative_slope = negative_slope

    def forward(self, x):
        c = self.conv
        y = F.conv2d(x.contiguous(), c.weight, c.bias, c.stride, c.padding, c.dilation, c.groups)  # cuDNN, fresh
        inorm = self.instance_norm
        if inorm.track_running_stats:
            raise NotImplementedError("fused kernel covers InstanceNorm2d without running statistics (the default)")
        if inorm.affine:
            w, b = inorm.weight.contiguous(), inorm.bias.contiguous()
        else:
            w = b = y.new_empty(0)
        return _ext.instancenorm_leaky_(y.contiguous(), w, b, float(inorm.eps), float(self.negative_slope))
