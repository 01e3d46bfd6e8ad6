# Keeps the convolution in cuDNN (F.conv2d with the module's own weight and bias), then replaces
# BatchNorm2d (training mode, batch statistics) + ReLU with two custom kernels:
#   1. a per-(n, c)-plane reduction (float4 loads, double accumulation, warp-shuffle block reduce) producing
#      partial sums / sums of squares, finalized per channel into scale/shift (and the running-stat update);
#   2. one fused, vectorized normalize + affine + ReLU pass written in place over the conv output.
# Eager PyTorch reads the 520 MB activation for the statistics, reads+writes it to normalize, then reads+writes
# it again for ReLU; here it is read twice and written once.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = ("torch::Tensor bn_relu_train_(torch::Tensor y, torch::Tensor gamma, torch::Tensor beta, "
           "torch::Tensor running_mean, torch::Tensor running_var, double eps, double momentum);")

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>

__device__ __forceinline__ double warp_sum_d(double v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// grid.x = N*C planes (grid-stride); each block reduces one contiguous plane of HW values.
template <bool VEC>
__global__ void plane_stats_kernel(const float* __restrict__ y, double* __restrict__ psum,
                                   double* __restrict__ psq, long long planes, int C, int N, long long HW) {
    __shared__ double s_sum[32], s_sq[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    for (long long p = blockIdx.x; p < planes; p += gridDim.x) {
        const float* src = y + (size_t)p * HW;
        double sum = 0.0, sq = 0.0;
        if (VEC) {
            const float4* s4 = reinterpret_cast<const float4*>(src);
            const long long HW4 = HW >> 2;
            for (long long j = threadIdx.x; j < HW4; j += blockDim.x) {
                float4 v = s4[j];
                sum += (double)v.x + (double)v.y + (double)v.z + (double)v.w;
                sq += (double)v.x * v.x + (double)v.y * v.y + (double)v.z * v.z + (double)v.w * v.w;
            }
        } else {
            for (long long j = threadIdx.x; j < HW; j += blockDim.x) {
                double v = src[j];
                sum += v;
                sq += v * v;
            }
        }
        sum = warp_sum_d(sum);
        sq = warp_sum_d(sq);
        if (lane == 0) { s_sum[warp] = sum; s_sq[warp] = sq; }
        __syncthreads();
        if (warp == 0) {
            sum = (lane < nwarps) ? s_sum[lane] : 0.0;
            sq = (lane < nwarps) ? s_sq[lane] : 0.0;
            sum = warp_sum_d(sum);
            sq = warp_sum_d(sq);
            if (lane == 0) {
                const int n = (int)(p / C), c = (int)(p % C);
                psum[(size_t)c * N + n] = sum;
                psq[(size_t)c * N + n] = sq;
            }
        }
        __syncthreads();  // shared arrays are reused by the next plane
    }
}

// One thread per channel: combine the N partials, produce scale/shift, update running statistics.
__global__ void bn_finalize_kernel(const double* __restrict__ psum, const double* __restrict__ psq,
                                   const float* __restrict__ gamma, const float* __restrict__ beta,
                                   float* __restrict__ running_mean, float* __restrict__ running_var,
                                   float* __restrict__ scale, float* __restrict__ shift,
                                   int C, int N, double count, double eps, double momentum) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double sum = 0.0, sq = 0.0;
    for (int n = 0; n < N; ++n) {
        sum += psum[(size_t)c * N + n];
        sq += psq[(size_t)c * N + n];
    }
    const double mean = sum / count;
    double var = sq / count - mean * mean;  // biased variance (used for normalization)
    if (var < 0.0) var = 0.0;
    const double invstd = 1.0 / sqrt(var + eps);
    const double sc = (double)gamma[c] * invstd;
    scale[c] = (float)sc;
    shift[c] = (float)((double)beta[c] - mean * sc);
    const double unbiased = count > 1.0 ? var * count / (count - 1.0) : var;
    running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + momentum * mean);
    running_var[c] = (float)((1.0 - momentum) * running_var[c] + momentum * unbiased);
}

// grid.y walks planes (grid-stride), grid.x / threads walk the plane; channel is per plane, no division per element.
template <bool VEC>
__global__ void bn_apply_relu_kernel(float* __restrict__ y, const float* __restrict__ scale,
                                     const float* __restrict__ shift, long long planes, int C, long long HW) {
    for (long long p = blockIdx.y; p < planes; p += gridDim.y) {
        const int c = (int)(p % C);
        const float sc = __ldg(&scale[c]), sh = __ldg(&shift[c]);
        float* dst = y + (size_t)p * HW;
        if (VEC) {
            float4* d4 = reinterpret_cast<float4*>(dst);
            const long long HW4 = HW >> 2;
            for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < HW4; j += (long long)gridDim.x * blockDim.x) {
                float4 v = d4[j];
                v.x = fmaxf(fmaf(v.x, sc, sh), 0.0f);
                v.y = fmaxf(fmaf(v.y, sc, sh), 0.0f);
                v.z = fmaxf(fmaf(v.z, sc, sh), 0.0f);
                v.w = fmaxf(fmaf(v.w, sc, sh), 0.0f);
                d4[j] = v;
            }
        } else {
            for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < HW; j += (long long)gridDim.x * blockDim.x)
                dst[j] = fmaxf(fmaf(dst[j], sc, sh), 0.0f);
        }
    }
}

torch::Tensor bn_relu_train_(torch::Tensor y, torch::Tensor gamma, torch::Tensor beta,
                             torch::Tensor running_mean, torch::Tensor running_var, double eps, double momentum) {
    TORCH_CHECK(y.is_cuda() && gamma.is_cuda() && beta.is_cuda() && running_mean.is_cuda() && running_var.is_cuda(),
                "inputs must be CUDA tensors");
    TORCH_CHECK(y.is_contiguous() && gamma.is_contiguous() && beta.is_contiguous() &&
                running_mean.is_contiguous() && running_var.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32 && gamma.scalar_type() == torch::kFloat32 &&
                beta.scalar_type() == torch::kFloat32 && running_mean.scalar_type() == torch::kFloat32 &&
                running_var.scalar_type() == torch::kFloat32, "inputs must be float32");
    TORCH_CHECK(y.dim() >= 2, "input must be (N, C, ...)");
    const int N = (int)y.size(0), C = (int)y.size(1);
    TORCH_CHECK(gamma.numel() == C && beta.numel() == C && running_mean.numel() == C && running_var.numel() == C,
                "parameter size mismatch");
    const long long HW = C > 0 && N > 0 ? y.numel() / ((long long)N * C) : 0;
    const long long planes = (long long)N * C;
    if (y.numel() == 0) return y;
    auto stream = c10::cuda::getCurrentCUDAStream();
    auto dopt = y.options().dtype(torch::kFloat64);
    auto psum = torch::empty({(long long)C * N}, dopt);
    auto psq = torch::empty({(long long)C * N}, dopt);
    auto scale = torch::empty({C}, y.options());
    auto shift = torch::empty({C}, y.options());
    const bool vec = (HW % 4 == 0) && (reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0);

    const int threads = 256;
    const unsigned sblocks = (unsigned)std::min<long long>(planes, 1LL << 20);
    if (vec)
        plane_stats_kernel<true><<<sblocks, threads, 0, stream>>>(y.data_ptr<float>(), psum.data_ptr<double>(),
                                                                  psq.data_ptr<double>(), planes, C, N, HW);
    else
        plane_stats_kernel<false><<<sblocks, threads, 0, stream>>>(y.data_ptr<float>(), psum.data_ptr<double>(),
                                                                   psq.data_ptr<double>(), planes, C, N, HW);
    C10_CUDA_KERNEL_LAUNCH_CHECK();

    bn_finalize_kernel<<<(C + 127) / 128, 128, 0, stream>>>(
        psum.data_ptr<double>(), psq.data_ptr<double>(), gamma.data_ptr<float>(), beta.data_ptr<float>(),
        running_mean.data_ptr<float>(), running_var.data_ptr<float>(), scale.data_ptr<float>(),
        shift.data_ptr<float>(), C, N, (double)N * (double)HW, eps, momentum);
    C10_CUDA_KERNEL_LAUNCH_CHECK();

    const long long work = vec ? HW / 4 : HW;
    long long bx = (work + threads * 4 - 1) / (threads * 4);  // ~4 items per thread
    if (bx < 1) bx = 1;
    if (bx > 65535) bx = 65535;
    const unsigned by = (unsigned)std::min<long long>(planes, 65535);
    dim3 grid((unsigned)bx, by);
    if (vec)
        bn_apply_relu_kernel<true><<<grid, threads, 0, stream>>>(y.data_ptr<float>(), scale.data_ptr<float>(),
                                                                 shift.data_ptr<float>(), planes, C, HW);
    else
        bn_apply_relu_kernel<false><<<grid, threads, 0, stream>>>(y.data_ptr<float>(), scale.data_ptr<float>(),
                                                                  shift.data_ptr<float>(), planes, C, HW);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(name="kb_l2_024_conv2d_bn_relu", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["bn_relu_train_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bn = nn.BatchNorm2d(out_channels)

    def forward(self, x):
        c = self.conv
        y = F.conv2d(x.contiguous(), c.weight, c.bias, c.stride, c.padding, c.dilation, c.groups)  # cuDNN, fresh output
        y = y.contiguous()
        bn = self.bn
        momentum = bn.momentum if bn.momentum is not None else 0.0
        with torch.no_grad():
            bn.num_batches_tracked.add_(1)
            if bn.momentum is None:  # cumulative moving average, as nn.BatchNorm does
                momentum = 1.0 / float(bn.num_batches_tracked.item())
        return _ext.bn_relu_train_(y, bn.weight.contiguous(), bn.bias.contiguous(), bn.running_mean,
                                   bn.running_var, float(bn.eps), float(momentum))
