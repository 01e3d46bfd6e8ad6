# Keeps the convolution in cuDNN (F.conv2d with the module's own weight and bias), then replaces GroupNorm +
# tanh with two custom kernels: a statistics pass (each group of 8 channels x 126 x 126 = 127k contiguous values
# split over a few blocks, float4 loads, double sums / sums of squares, deterministic partials) and ONE fused,
# vectorized normalize + affine + tanh pass written in place over the conv's fresh output. Eager PyTorch reads
# the 64x64x126x126 activation (260 MB) for the statistics, reads and writes it to normalize, then reads and
# writes it again for tanh; here it is read twice and written once.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = ("torch::Tensor groupnorm_tanh_(torch::Tensor y, torch::Tensor gamma, torch::Tensor beta, int64_t groups, "
           "double eps);")

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>

__device__ __forceinline__ double warp_sum_d(double v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

__device__ __forceinline__ float act(float x) { return tanhf(x); }  // torch.tanh

// Statistics: block b reduces slice (b % S) of group (b / S), a contiguous run of the group's L = cpg * HW values,
// into one double partial sum and sum of squares (fixed order: deterministic, no atomics).
template <bool VEC>
__global__ void gn_stats_kernel(const float* __restrict__ y, double* __restrict__ psum, double* __restrict__ psq,
                                long long L, long long chunk, int S) {
    __shared__ double s_sum[32], s_sq[32];
    const long long grp = blockIdx.x / S;
    const int s = blockIdx.x % S;
    const long long b0 = (long long)s * chunk;
    const long long b1 = (b0 + chunk < L) ? b0 + chunk : L;
    const float* base = y + (size_t)grp * L;
    double sum = 0.0, sq = 0.0;
    if (b0 < b1) {
        if (VEC) {  // b0 and L are multiples of 4 here
            const float4* p4 = reinterpret_cast<const float4*>(base + b0);
            const long long n4 = (b1 - b0) >> 2;
            for (long long j = threadIdx.x; j < n4; j += blockDim.x) {
                const float4 v = __ldg(&p4[j]);
                const double x0 = v.x, x1 = v.y, x2 = v.z, x3 = v.w;
                sum += (x0 + x1) + (x2 + x3);
                sq += (x0 * x0 + x1 * x1) + (x2 * x2 + x3 * x3);
            }
        } else {
            for (long long j = b0 + threadIdx.x; j < b1; j += blockDim.x) {
                const double x = __ldg(&base[j]);
                sum += x;
                sq += x * x;
            }
        }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    sum = warp_sum_d(sum);
    sq = warp_sum_d(sq);
    if (lane == 0) { s_sum[warp] = sum; s_sq[warp] = sq; }
    __syncthreads();
    if (warp == 0) {
        sum = lane < nw ? s_sum[lane] : 0.0;
        sq = lane < nw ? s_sq[lane] : 0.0;
        sum = warp_sum_d(sum);
        sq = warp_sum_d(sq);
        if (lane == 0) { psum[blockIdx.x] = sum; psq[blockIdx.x] = sq; }
    }
}

// Apply: grid.y walks the N*C planes (grid-stride), grid.x / threads walk one plane of HW values. Per plane,
// thread 0 folds the group's S partials into PyTorch's fused parameters a = rstd * gamma[c],
// b = beta[c] - a * mean, then every element becomes tanh(x * a + b), in place.
template <bool VEC>
__global__ void gn_apply_kernel(float* __restrict__ y, const double* __restrict__ psum, const double* __restrict__ psq,
                                const float* __restrict__ gamma, const float* __restrict__ beta, long long planes,
                                int C, int cpg, int S, long long HW, double count, double eps) {
    __shared__ float s_ab[2];
    for (long long p = blockIdx.y; p < planes; p += gridDim.y) {
        const int c = (int)(p % C);
        if (threadIdx.x == 0) {
            const long long grp = (p / C) * (C / cpg) + c / cpg;
            double sum = 0.0, sq = 0.0;
            for (int s = 0; s < S; ++s) { sum += psum[grp * S + s]; sq += psq[grp * S + s]; }
            const double mean = sum / count;
            double var = sq / count - mean * mean;  // biased variance, as GroupNorm uses
            if (var < 0.0) var = 0.0;
            const double rstd = 1.0 / sqrt(var + eps);
            const double a = rstd * (double)gamma[c];
            s_ab[0] = (float)a;
            s_ab[1] = (float)((double)beta[c] - a * mean);
        }
        __syncthreads();
        const float a = s_ab[0], b = s_ab[1];
        float* dst = y + (size_t)p * HW;
        const long long step = (long long)gridDim.x * blockDim.x;
        if (VEC) {
            float4* d4 = reinterpret_cast<float4*>(dst);
            const long long HW4 = HW >> 2;
            for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < HW4; j += step) {
                float4 v = d4[j];
                v.x = act(v.x * a + b); v.y = act(v.y * a + b); v.z = act(v.z * a + b); v.w = act(v.w * a + b);
                d4[j] = v;
            }
        } else {
            for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < HW; j += step)
                dst[j] = act(dst[j] * a + b);
        }
        __syncthreads();  // s_ab is rewritten for the next plane
    }
}

torch::Tensor groupnorm_tanh_(torch::Tensor y, torch::Tensor gamma, torch::Tensor beta, int64_t groups, double eps) {
    TORCH_CHECK(y.is_cuda() && gamma.is_cuda() && beta.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(y.is_contiguous() && gamma.is_contiguous() && beta.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32 && gamma.scalar_type() == torch::kFloat32 &&
                beta.scalar_type() == torch::kFloat32, "inputs must be float32");
    TORCH_CHECK(y.dim() >= 2, "y must be (N, C, ...)");
    const long long N = y.size(0), C = y.size(1);
    TORCH_CHECK(groups >= 1 && C % groups == 0, "channels must be divisible by num_groups");
    TORCH_CHECK(gamma.numel() == C && beta.numel() == C, "GroupNorm weight/bias size mismatch");
    if (y.numel() == 0) return y;
    const long long planes = N * C;
    const long long HW = y.numel() / planes;
    const int cpg = (int)(C / groups);
    const long long NG = N * groups;
    const long long L = (long long)cpg * HW;
    const bool vec = (HW % 4 == 0) && (reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0);
    // ~2048 statistics blocks, each slice at least 8192 values
    long long S = (2048 + NG - 1) / NG;
    S = std::max(1LL, std::min(S, L / 8192));
    long long chunk = (L + S - 1) / S;
    chunk = (chunk + 3) / 4 * 4;
    S = (L + chunk - 1) / chunk;
    auto dopt = y.options().dtype(torch::kFloat64);
    auto psum = torch::empty({NG * S}, dopt);
    auto psq = torch::empty({NG * S}, dopt);
    auto stream = c10::cuda::getCurrentCUDAStream();
    const int sthreads = 512;
    TORCH_CHECK(NG * S < (1LL << 31), "too many groups");
    if (vec)
        gn_stats_kernel<true><<<(unsigned)(NG * S), sthreads, 0, stream>>>(y.data_ptr<float>(), psum.data_ptr<double>(),
                                                                            psq.data_ptr<double>(), L, chunk, (int)S);
    else
        gn_stats_kernel<false><<<(unsigned)(NG * S), sthreads, 0, stream>>>(y.data_ptr<float>(), psum.data_ptr<double>(),
                                                                             psq.data_ptr<double>(), L, chunk, (int)S);
    C10_CUDA_KERNEL_LAUNCH_CHECK();

    const int threads = 256;
    const long long work = vec ? HW / 4 : HW;
    long long bx = (work + threads * 4 - 1) / (threads * 4);
    bx = std::max(1LL, std::min(bx, 65535LL));
    const unsigned by = (unsigned)std::min(planes, 65535LL);
    dim3 grid((unsigned)bx, by);
    if (vec)
        gn_apply_kernel<true><<<grid, threads, 0, stream>>>(y.data_ptr<float>(), psum.data_ptr<double>(),
                                                             psq.data_ptr<double>(), gamma.data_ptr<float>(),
                                                             beta.data_ptr<float>(), planes, (int)C, cpg, (int)S, HW,
                                                             (double)L, eps);
    else
        gn_apply_kernel<false><<<grid, threads, 0, stream>>>(y.data_ptr<float>(), psum.data_ptr<double>(),
                                                              psq.data_ptr<double>(), gamma.data_ptr<float>(),
                                                              beta.data_ptr<float>(), planes, (int)C, cpg, (int)S, HW,
                                                              (double)L, eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(name="kb_l2_021_gn_tanh_c2", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["groupnorm_tanh_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, num_groups):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.group_norm = nn.GroupNorm(num_groups, out_channels)

    def forward(self, x):
        c = self.conv
        y = F.conv2d(x.contiguous(), c.weight, c.bias, c.stride, c.padding, c.dilation, c.groups)  # cuDNN, fresh
        gn = self.group_norm
        return _ext.groupnorm_tanh_(y.contiguous(), gn.weight.contiguous(), gn.bias.contiguous(),
                                       int(gn.num_groups), float(gn.eps))
