# Keeps the transposed convolution in cuDNN (F.conv_transpose2d with the module's own weight and bias), then
# replaces GELU + GroupNorm with two custom kernels that never materialize the GELU output:
#   1. a statistics kernel: several blocks per (n, group) stream that group's contiguous slice with float4 loads,
#      apply GELU on the fly and accumulate sum / sum of squares in double (warp-shuffle block reduction);
#   2. a fused apply kernel: recomputes GELU, normalizes with the group's mean/rstd and the per-channel affine,
#      and writes the result (float4, one pass).
# Eager PyTorch reads+writes the 537 MB tensor for GELU, then GroupNorm reads it for statistics and reads+writes
# it again: 3 reads + 2 writes versus 2 reads + 1 write here.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = ("torch::Tensor gelu_groupnorm(torch::Tensor y, torch::Tensor gamma, torch::Tensor beta, int64_t groups, "
           "double eps);")

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>

__device__ __forceinline__ float geluf(float v) {
    return v * 0.5f * (1.0f + erff(v * 0.70710678118654752440f));
}

__device__ __forceinline__ double warp_sum_d(double v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// grid = (B chunks per group, N*G groups). Group ng occupies [ng*gsize, (ng+1)*gsize) of the NCHW tensor.
// chunk is a multiple of 4 when VEC.
template <bool VEC>
__global__ void gelu_group_stats_kernel(const float* __restrict__ y, double2* __restrict__ partial,
                                        long long gsize, long long chunk) {
    const long long ng = blockIdx.y;
    const long long start = (long long)blockIdx.x * chunk;
    long long end = start + chunk;
    if (end > gsize) end = gsize;
    const float* src = y + (size_t)ng * gsize;
    double sum = 0.0, sq = 0.0;
    if (VEC) {
        const float4* s4 = reinterpret_cast<const float4*>(src);
        for (long long j = (start >> 2) + threadIdx.x; j < (end >> 2); j += blockDim.x) {
            float4 v = s4[j];
            float a = geluf(v.x), b = geluf(v.y), c = geluf(v.z), d = geluf(v.w);
            sum += (double)a + (double)b + (double)c + (double)d;
            sq += (double)a * a + (double)b * b + (double)c * c + (double)d * d;
        }
    } else {
        for (long long j = start + threadIdx.x; j < end; j += blockDim.x) {
            double g = geluf(src[j]);
            sum += g;
            sq += g * g;
        }
    }
    __shared__ double s_sum[32], s_sq[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    sum = warp_sum_d(sum);
    sq = warp_sum_d(sq);
    if (lane == 0) { s_sum[warp] = sum; s_sq[warp] = sq; }
    __syncthreads();
    if (warp == 0) {
        sum = (lane < nwarps) ? s_sum[lane] : 0.0;
        sq = (lane < nwarps) ? s_sq[lane] : 0.0;
        sum = warp_sum_d(sum);
        sq = warp_sum_d(sq);
        if (lane == 0) partial[ng * gridDim.x + blockIdx.x] = make_double2(sum, sq);
    }
}

// grid = (x over the plane, N*C planes via grid-stride on y). Each block folds its group's B partials.
template <bool VEC>
__global__ void gelu_group_apply_kernel(const float* __restrict__ y, float* __restrict__ out,
                                        const double2* __restrict__ partial, const float* __restrict__ gamma,
                                        const float* __restrict__ beta, long long planes, int C, int G, int B,
                                        long long HW, double count, float eps) {
    __shared__ float s_mean, s_rstd;
    const int cpg = C / G;
    for (long long p = blockIdx.y; p < planes; p += gridDim.y) {
        const long long n = p / C;
        const int c = (int)(p % C);
        const long long ng = n * G + c / cpg;
        if (threadIdx.x == 0) {
            double sum = 0.0, sq = 0.0;
            for (int b = 0; b < B; ++b) {
                double2 t = partial[ng * B + b];
                sum += t.x;
                sq += t.y;
            }
            double mean = sum / count;
            double var = sq / count - mean * mean;
            if (var < 0.0) var = 0.0;
            s_mean = (float)mean;
            s_rstd = (float)(1.0 / sqrt(var + (double)eps));
        }
        __syncthreads();
        const float mean = s_mean;
        const float a = s_rstd * __ldg(&gamma[c]);
        const float bb = __ldg(&beta[c]);
        const float* src = y + (size_t)p * HW;
        float* dst = out + (size_t)p * HW;
        const long long stride = (long long)gridDim.x * blockDim.x;
        if (VEC) {
            const float4* s4 = reinterpret_cast<const float4*>(src);
            float4* d4 = reinterpret_cast<float4*>(dst);
            for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < (HW >> 2); j += stride) {
                float4 v = s4[j];
                v.x = (geluf(v.x) - mean) * a + bb;
                v.y = (geluf(v.y) - mean) * a + bb;
                v.z = (geluf(v.z) - mean) * a + bb;
                v.w = (geluf(v.w) - mean) * a + bb;
                d4[j] = v;
            }
        } else {
            for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < HW; j += stride)
                dst[j] = (geluf(src[j]) - mean) * a + bb;
        }
        __syncthreads();  // s_mean / s_rstd are rewritten for the next plane
    }
}

torch::Tensor gelu_groupnorm(torch::Tensor y, torch::Tensor gamma, torch::Tensor beta, int64_t groups, double eps) {
    TORCH_CHECK(y.is_cuda() && gamma.is_cuda() && beta.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(y.is_contiguous() && gamma.is_contiguous() && beta.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32 && gamma.scalar_type() == torch::kFloat32 &&
                beta.scalar_type() == torch::kFloat32, "inputs must be float32");
    TORCH_CHECK(y.dim() >= 2, "input must be (N, C, ...)");
    const long long N = y.size(0);
    const int C = (int)y.size(1);
    const int G = (int)groups;
    TORCH_CHECK(G > 0 && C % G == 0, "channels must be divisible by groups");
    TORCH_CHECK(gamma.numel() == C && beta.numel() == C, "parameter size mismatch");
    auto out = torch::empty_like(y);
    if (y.numel() == 0) return out;
    const long long HW = y.numel() / (N * C);
    const long long gsize = (long long)(C / G) * HW;
    const long long ngroups = N * G;
    TORCH_CHECK(ngroups <= 65535, "too many (batch, group) pairs for this kernel");
    const bool vec = (HW % 4 == 0) && (reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0) &&
                     (reinterpret_cast<uintptr_t>(out.data_ptr<float>()) % 16 == 0);
    // ~16K elements per statistics block, at most 64 blocks per group; chunk rounded up to a multiple of 4.
    long long B = (gsize + 16383) / 16384;
    if (B < 1) B = 1;
    if (B > 64) B = 64;
    long long chunk = (gsize + B - 1) / B;
    chunk = (chunk + 3) / 4 * 4;
    B = (gsize + chunk - 1) / chunk;
    auto partial = torch::empty({ngroups * B * 2}, y.options().dtype(torch::kFloat64));
    double2* pp = reinterpret_cast<double2*>(partial.data_ptr<double>());
    auto stream = c10::cuda::getCurrentCUDAStream();
    const int threads = 256;
    dim3 sgrid((unsigned)B, (unsigned)ngroups);
    if (vec)
        gelu_group_stats_kernel<true><<<sgrid, threads, 0, stream>>>(y.data_ptr<float>(), pp, gsize, chunk);
    else
        gelu_group_stats_kernel<false><<<sgrid, threads, 0, stream>>>(y.data_ptr<float>(), pp, gsize, chunk);
    C10_CUDA_KERNEL_LAUNCH_CHECK();

    const long long planes = N * C;
    const long long work = vec ? HW / 4 : HW;
    long long bx = (work + threads * 4 - 1) / (threads * 4);  // ~4 items per thread
    if (bx < 1) bx = 1;
    if (bx > 65535) bx = 65535;
    dim3 agrid((unsigned)bx, (unsigned)std::min<long long>(planes, 65535));
    if (vec)
        gelu_group_apply_kernel<true><<<agrid, threads, 0, stream>>>(y.data_ptr<float>(), out.data_ptr<float>(), pp,
            gamma.data_ptr<float>(), beta.data_ptr<float>(), planes, C, G, (int)B, HW, (double)gsize, (float)eps);
    else
        gelu_group_apply_kernel<false><<<agrid, threads, 0, stream>>>(y.data_ptr<float>(), out.data_ptr<float>(), pp,
            gamma.data_ptr<float>(), beta.data_ptr<float>(), planes, C, G, (int)B, HW, (double)gsize, (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(name="kb_l2_036_convt2d_gelu_groupnorm", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["gelu_groupnorm"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, num_groups):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding)
        self.group_norm = nn.GroupNorm(num_groups, out_channels)

    def forward(self, x):
        ct = self.conv_transpose
        y = F.conv_transpose2d(x.contiguous(), ct.weight, ct.bias, ct.stride, ct.padding, ct.output_padding,
                               ct.groups, ct.dilation)  # cuDNN
        gn = self.group_norm
        return _ext.gelu_groupnorm(y.contiguous(), gn.weight.contiguous(), gn.bias.contiguous(), gn.num_groups,
                                   float(gn.eps))
