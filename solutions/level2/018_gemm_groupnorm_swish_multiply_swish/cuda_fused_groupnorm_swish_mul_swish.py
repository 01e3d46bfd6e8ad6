# Keeps the GEMM (+ bias) in cuBLAS via F.linear with the module's own weights, then fuses GroupNorm
# (per-row groups of 64 features) + affine + swish + per-feature multiply + swish into ONE kernel: one warp per
# (row, group) loads the group into registers (coalesced), computes mean and variance with warp shuffles
# (two-pass, in registers), then normalizes, applies the activations and writes once. Eager PyTorch runs
# GroupNorm (stats + apply) and five elementwise kernels (sigmoid, mul, mul, sigmoid, mul), each reading and
# writing the 16384x4096 activation; fused it is one read and one write.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = ("torch::Tensor gn_swish_mul_swish(torch::Tensor y, torch::Tensor gamma, torch::Tensor beta, "
           "torch::Tensor mw, int64_t groups, double eps);")

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

__device__ __forceinline__ float warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

__device__ __forceinline__ float swishf(float t) {
    float s = 1.0f / (1.0f + expf(-t));
    return t * s;
}

// One warp handles one (row, group) of gs = C / G contiguous features; gs <= 32 * MAXPER.
template <int MAXPER>
__global__ void gn_swish_mul_swish_kernel(const float* __restrict__ y, float* __restrict__ out,
                                          const float* __restrict__ gamma, const float* __restrict__ beta,
                                          const float* __restrict__ mw, long long total, int C, int G,
                                          float eps) {
    const int lane = threadIdx.x & 31;
    const long long wid = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (wid >= total) return;  // uniform per warp
    const int gs = C / G;
    const long long row = wid / G;
    const int g = (int)(wid % G);
    const size_t base = (size_t)row * C + (size_t)g * gs;
    const float* src = y + base;
    float* dst = out + base;

    float v[MAXPER];
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < MAXPER; ++k) {
        int j = lane + k * 32;
        v[k] = (j < gs) ? src[j] : 0.0f;
        sum += v[k];
    }
    sum = warp_sum(sum);
    const float mean = sum / (float)gs;
    float sq = 0.0f;
#pragma unroll
    for (int k = 0; k < MAXPER; ++k) {
        int j = lane + k * 32;
        if (j < gs) { float d = v[k] - mean; sq += d * d; }
    }
    sq = warp_sum(sq);
    const float rstd = rsqrtf(sq / (float)gs + eps);
#pragma unroll
    for (int k = 0; k < MAXPER; ++k) {
        int j = lane + k * 32;
        if (j < gs) {
            int c = g * gs + j;
            float t = (v[k] - mean) * rstd * __ldg(&gamma[c]) + __ldg(&beta[c]);
            t = swishf(t);
            t = t * __ldg(&mw[c]);
            t = swishf(t);
            dst[j] = t;
        }
    }
}

torch::Tensor gn_swish_mul_swish(torch::Tensor y, torch::Tensor gamma, torch::Tensor beta, torch::Tensor mw,
                                 int64_t groups, double eps) {
    TORCH_CHECK(y.is_cuda() && gamma.is_cuda() && beta.is_cuda() && mw.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(y.is_contiguous() && gamma.is_contiguous() && beta.is_contiguous() && mw.is_contiguous(),
                "inputs must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32 && gamma.scalar_type() == torch::kFloat32 &&
                beta.scalar_type() == torch::kFloat32 && mw.scalar_type() == torch::kFloat32, "inputs must be float32");
    TORCH_CHECK(y.dim() == 2, "input must be 2-D");
    const long long rows = y.size(0);
    const int C = (int)y.size(1);
    const int G = (int)groups;
    TORCH_CHECK(G > 0 && C % G == 0, "channels must be divisible by groups");
    TORCH_CHECK(gamma.numel() == C && beta.numel() == C && mw.numel() == C, "parameter size mismatch");
    const int gs = C / G;
    TORCH_CHECK(gs <= 32 * 32, "group size too large for this kernel");
    auto out = torch::empty_like(y);
    const long long total = rows * G;
    if (total == 0) return out;
    const int threads = 256;
    const long long blocks = (total + (threads / 32) - 1) / (threads / 32);
    TORCH_CHECK(blocks < (1LL << 31), "too many rows");
    auto stream = c10::cuda::getCurrentCUDAStream();
#define LAUNCH(MP) gn_swish_mul_swish_kernel<MP><<<(unsigned)blocks, threads, 0, stream>>>( \
        y.data_ptr<float>(), out.data_ptr<float>(), gamma.data_ptr<float>(), beta.data_ptr<float>(), \
        mw.data_ptr<float>(), total, C, G, (float)eps)
    if (gs <= 32) LAUNCH(1);
    else if (gs <= 64) LAUNCH(2);
    else if (gs <= 128) LAUNCH(4);
    else if (gs <= 256) LAUNCH(8);
    else if (gs <= 512) LAUNCH(16);
    else LAUNCH(32);
#undef LAUNCH
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(name="kb_l2_018_gn_swish_mul_swish", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["gn_swish_mul_swish"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, num_groups, multiply_weight_shape):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.group_norm = nn.GroupNorm(num_groups, out_features)
        self.multiply_weight = nn.Parameter(torch.randn(multiply_weight_shape))

    def forward(self, x):
        y = F.linear(x.contiguous(), self.linear.weight, self.linear.bias)  # cuBLAS GEMM
        return _ext.gn_swish_mul_swish(y, self.group_norm.weight.contiguous(), self.group_norm.bias.contiguous(),
                                       self.multiply_weight.contiguous(), self.group_norm.num_groups,
                                       float(self.group_norm.eps))
