# Keeps the GEMM (+ its bias) in cuBLAS via F.linear with the module's own weights, then replaces BatchNorm1d
# (training mode: batch statistics over the 16384 rows, running-stat update) + ReLU with three small kernels:
#   1. column statistics: coalesced float4 row sweeps, each block owning a column tile and a slice of rows,
#      double accumulation of sum / sum of squares, one partial per (slice, column) -- no atomics, deterministic;
#   2. a per-column finalize (mean, biased variance for normalizing, unbiased for running_var);
#   3. one fused, vectorized normalize + affine + ReLU pass written in place over the GEMM's fresh output.
# Eager PyTorch reads the 16384x4096 activation (256 MB) for the statistics, reads and writes it to normalize,
# then reads and writes it again for ReLU; here it is read twice and written once.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = ("torch::Tensor bn1d_relu_train_(torch::Tensor y, torch::Tensor gamma, torch::Tensor beta, "
           "torch::Tensor running_mean, torch::Tensor running_var, double eps, double momentum);")

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>

constexpr int TX = 32;  // column groups per block (a warp: coalesced along the row)
constexpr int TY = 8;   // rows swept in parallel per block

// grid.x: tiles of TX*W columns; grid.y: slices of rows_per_split rows. W = 4 (float4) when C % 4 == 0.
template <int W>
__global__ void col_stats_kernel(const float* __restrict__ y, double* __restrict__ psum, double* __restrict__ psq,
                                 long long R, int C, long long rows_per_split) {
    __shared__ double s_sum[TY][TX * W];
    __shared__ double s_sq[TY][TX * W];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c0 = (blockIdx.x * TX + tx) * W;
    const long long r0 = (long long)blockIdx.y * rows_per_split;
    const long long r1 = (r0 + rows_per_split < R) ? r0 + rows_per_split : R;
    double sum[W], sq[W];
#pragma unroll
    for (int k = 0; k < W; ++k) { sum[k] = 0.0; sq[k] = 0.0; }
    if (c0 < C) {
        for (long long r = r0 + ty; r < r1; r += TY) {
            const float* p = y + (size_t)r * C + c0;
            float v[W];
            if constexpr (W == 4) {
                const float4 t = __ldg(reinterpret_cast<const float4*>(p));
                v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
            } else {
                v[0] = __ldg(p);
            }
#pragma unroll
            for (int k = 0; k < W; ++k) { const double d = v[k]; sum[k] += d; sq[k] += d * d; }
        }
    }
#pragma unroll
    for (int k = 0; k < W; ++k) { s_sum[ty][tx * W + k] = sum[k]; s_sq[ty][tx * W + k] = sq[k]; }
    __syncthreads();
    if (ty == 0 && c0 < C) {
#pragma unroll
        for (int k = 0; k < W; ++k) {
            double a = 0.0, b = 0.0;
            for (int j = 0; j < TY; ++j) { a += s_sum[j][tx * W + k]; b += s_sq[j][tx * W + k]; }
            psum[(size_t)blockIdx.y * C + c0 + k] = a;
            psq[(size_t)blockIdx.y * C + c0 + k] = b;
        }
    }
}

// One thread per column: combine the slices' partials (fixed order), produce mean / scale and update running stats.
__global__ void bn_finalize_kernel(const double* __restrict__ psum, const double* __restrict__ psq, int splits,
                                   const float* __restrict__ gamma, float* __restrict__ running_mean,
                                   float* __restrict__ running_var, float* __restrict__ mean_out,
                                   float* __restrict__ scale_out, int C, double count, double eps, double momentum) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double sum = 0.0, sq = 0.0;
    for (int s = 0; s < splits; ++s) { sum += psum[(size_t)s * C + c]; sq += psq[(size_t)s * C + c]; }
    const double mean = sum / count;
    double var = sq / count - mean * mean;  // biased variance (used for normalization)
    if (var < 0.0) var = 0.0;
    const double invstd = 1.0 / sqrt(var + eps);
    mean_out[c] = (float)mean;
    scale_out[c] = (float)((double)gamma[c] * invstd);
    const double unbiased = count > 1.0 ? var * count / (count - 1.0) : var;
    running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + momentum * mean);
    running_var[c] = (float)((1.0 - momentum) * running_var[c] + momentum * unbiased);
}

__device__ __forceinline__ float epi(float v, float mu, float sc, float b) { return fmaxf((v - mu) * sc + b, 0.0f); }

// grid.x * blockDim.x covers the column groups of one row; grid.y walks the rows (grid-stride).
template <int W>
__global__ void bn_apply_relu_kernel(float* __restrict__ y, const float* __restrict__ mean,
                                     const float* __restrict__ scale, const float* __restrict__ beta, long long R, int C) {
    const int cg = blockIdx.x * blockDim.x + threadIdx.x;
    if (cg * W >= C) return;
    if constexpr (W == 4) {
        const float4 mu = __ldg(reinterpret_cast<const float4*>(mean) + cg);
        const float4 sc = __ldg(reinterpret_cast<const float4*>(scale) + cg);
        const float4 b = __ldg(reinterpret_cast<const float4*>(beta) + cg);
        for (long long r = blockIdx.y; r < R; r += gridDim.y) {
            float4* p = reinterpret_cast<float4*>(y + (size_t)r * C) + cg;
            float4 v = *p;
            v.x = epi(v.x, mu.x, sc.x, b.x); v.y = epi(v.y, mu.y, sc.y, b.y);
            v.z = epi(v.z, mu.z, sc.z, b.z); v.w = epi(v.w, mu.w, sc.w, b.w);
            *p = v;
        }
    } else {
        const float mu = __ldg(&mean[cg]), sc = __ldg(&scale[cg]), b = __ldg(&beta[cg]);
        for (long long r = blockIdx.y; r < R; r += gridDim.y) {
            float* p = y + (size_t)r * C + cg;
            *p = epi(*p, mu, sc, b);
        }
    }
}

torch::Tensor bn1d_relu_train_(torch::Tensor y, torch::Tensor gamma, torch::Tensor beta, torch::Tensor running_mean,
                               torch::Tensor running_var, double eps, double momentum) {
    TORCH_CHECK(y.is_cuda() && gamma.is_cuda() && beta.is_cuda() && running_mean.is_cuda() && running_var.is_cuda(),
                "inputs must be CUDA tensors");
    TORCH_CHECK(y.is_contiguous() && gamma.is_contiguous() && beta.is_contiguous() && running_mean.is_contiguous() &&
                running_var.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32 && gamma.scalar_type() == torch::kFloat32 &&
                beta.scalar_type() == torch::kFloat32 && running_mean.scalar_type() == torch::kFloat32 &&
                running_var.scalar_type() == torch::kFloat32, "inputs must be float32");
    TORCH_CHECK(y.dim() == 2, "y must be (batch, features)");
    const long long R = y.size(0);
    const int C = (int)y.size(1);
    TORCH_CHECK(gamma.numel() == C && beta.numel() == C && running_mean.numel() == C && running_var.numel() == C,
                "BatchNorm parameter size mismatch");
    TORCH_CHECK(R > 1, "BatchNorm1d in training mode needs more than one value per channel");
    auto stream = c10::cuda::getCurrentCUDAStream();
    auto al = [](const torch::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr<float>()) % 16 == 0; };
    const bool vec = (C % 4 == 0) && al(y);
    const int W = vec ? 4 : 1;
    const int col_tiles = (C + TX * W - 1) / (TX * W);
    // enough row slices for ~1024 blocks, each slice at least 64 rows
    long long splits = std::max(1LL, std::min((R + 63) / 64, (1024LL + col_tiles - 1) / col_tiles));
    splits = std::min(splits, 65535LL);
    const long long rows_per_split = (R + splits - 1) / splits;
    splits = (R + rows_per_split - 1) / rows_per_split;
    auto dopt = y.options().dtype(torch::kFloat64);
    auto psum = torch::empty({splits * C}, dopt);
    auto psq = torch::empty({splits * C}, dopt);
    dim3 sblock(TX, TY), sgrid((unsigned)col_tiles, (unsigned)splits);
    if (vec)
        col_stats_kernel<4><<<sgrid, sblock, 0, stream>>>(y.data_ptr<float>(), psum.data_ptr<double>(),
                                                         psq.data_ptr<double>(), R, C, rows_per_split);
    else
        col_stats_kernel<1><<<sgrid, sblock, 0, stream>>>(y.data_ptr<float>(), psum.data_ptr<double>(),
                                                         psq.data_ptr<double>(), R, C, rows_per_split);
    C10_CUDA_KERNEL_LAUNCH_CHECK();

    auto mean = torch::empty({C}, y.options());
    auto scale = torch::empty({C}, y.options());
    bn_finalize_kernel<<<(C + 127) / 128, 128, 0, stream>>>(
        psum.data_ptr<double>(), psq.data_ptr<double>(), (int)splits, gamma.data_ptr<float>(),
        running_mean.data_ptr<float>(), running_var.data_ptr<float>(), mean.data_ptr<float>(), scale.data_ptr<float>(),
        C, (double)R, eps, momentum);
    C10_CUDA_KERNEL_LAUNCH_CHECK();

    const bool vec_apply = vec && al(beta);  // mean / scale are fresh allocations (aligned)
    const int groups = vec_apply ? C / 4 : C;
    const int threads = 256;
    dim3 agrid((unsigned)((groups + threads - 1) / threads), (unsigned)std::min(R, 2048LL));
    if (vec_apply)
        bn_apply_relu_kernel<4><<<agrid, threads, 0, stream>>>(y.data_ptr<float>(), mean.data_ptr<float>(),
                                                               scale.data_ptr<float>(), beta.data_ptr<float>(), R, C);
    else
        bn_apply_relu_kernel<1><<<agrid, threads, 0, stream>>>(y.data_ptr<float>(), mean.data_ptr<float>(),
                                                               scale.data_ptr<float>(), beta.data_ptr<float>(), R, C);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(name="kb_l2_004_bn1d_relu_c2", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["bn1d_relu_train_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features)

    def forward(self, x):
        y = F.linear(x.contiguous(), self.linear.weight, self.linear.bias)  # cuBLAS GEMM, fresh output
        bn = self.bn
        momentum = bn.momentum if bn.momentum is not None else 0.0
        with torch.no_grad():
            bn.num_batches_tracked.add_(1)
            if bn.momentum is None:  # cumulative moving average, as nn.BatchNorm does
                momentum = 1.0 / float(bn.num_batches_tracked.item())
        return _ext.bn1d_relu_train_(y.contiguous(), bn.weight.contiguous(), bn.bias.contiguous(), bn.running_mean,
                                     bn.running_var, float(bn.eps), float(momentum))
