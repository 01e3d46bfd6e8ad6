# Keeps the GEMM (+ its bias) in cuBLAS via F.linear with the module's own weights, then fuses GroupNorm (per
# row and group: mean, biased variance, rsqrt, per-feature affine) and HardSwish into ONE CUDA kernel: a block
# per row stages the GEMM row in shared memory with float4 loads, each warp normalizes whole groups from shared
# memory (two-pass mean / centered variance, warp-shuffle reductions) and writes hardswish(...) in place over the
# GEMM's fresh output. Eager PyTorch reads the 16384x2048 activation (128 MB) for the statistics, reads and
# writes it to normalize, then reads and writes it again for HardSwish; here it is read once and written once.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = ("torch::Tensor groupnorm_hardswish_(torch::Tensor y, torch::Tensor gamma, torch::Tensor beta, "
           "int64_t groups, double eps);")

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

__device__ __forceinline__ float hardswish(float x) {  // PyTorch: x * min(max(x + 3, 0), 6) / 6
    return x * fminf(fmaxf(x + 3.0f, 0.0f), 6.0f) / 6.0f;
}

// One block per row (grid-stride over rows). The row goes to shared memory (buf) when it fits; otherwise buf is
// the row itself in global memory, which is safe because each group is read and then written by one warp only.
__global__ void groupnorm_hardswish_kernel(float* y, const float* __restrict__ gamma, const float* __restrict__ beta,
                                           long long rows, int cols, int groups, float eps, bool use_smem, bool vec) {
    extern __shared__ float4 smem4[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int cpg = cols / groups;
    const float inv_cpg = 1.0f / (float)cpg;
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        float* row = y + (size_t)r * cols;
        float* buf = use_smem ? reinterpret_cast<float*>(smem4) : row;
        if (use_smem) {
            __syncthreads();  // the previous row's readers are done with buf
            if (vec) {
                const float4* r4 = reinterpret_cast<const float4*>(row);
                for (int j = threadIdx.x; j < (cols >> 2); j += blockDim.x) smem4[j] = r4[j];
            } else {
                for (int j = threadIdx.x; j < cols; j += blockDim.x) buf[j] = row[j];
            }
            __syncthreads();
        }
        for (int g = warp; g < groups; g += nw) {
            const float* gb = buf + (size_t)g * cpg;
            float s = 0.0f;
            for (int j = lane; j < cpg; j += 32) s += gb[j];
            const float mean = warp_sum(s) * inv_cpg;
            float q = 0.0f;
            for (int j = lane; j < cpg; j += 32) {
                const float d = gb[j] - mean;
                q += d * d;
            }
            const float var = warp_sum(q) * inv_cpg;  // biased variance
            const float rstd = rsqrtf(var + eps);
            float* go = row + (size_t)g * cpg;
            const int c0 = g * cpg;
            for (int j = lane; j < cpg; j += 32) {
                const float v = (gb[j] - mean) * rstd * __ldg(&gamma[c0 + j]) + __ldg(&beta[c0 + j]);
                go[j] = hardswish(v);
            }
        }
    }
}

torch::Tensor groupnorm_hardswish_(torch::Tensor y, torch::Tensor gamma, torch::Tensor beta, int64_t groups,
                                   double eps) {
    TORCH_CHECK(y.is_cuda() && gamma.is_cuda() && beta.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(y.is_contiguous() && gamma.is_contiguous() && beta.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32 && gamma.scalar_type() == torch::kFloat32 &&
                beta.scalar_type() == torch::kFloat32, "inputs must be float32");
    TORCH_CHECK(y.dim() == 2, "y must be (rows, features)");
    const long long rows = y.size(0);
    const int cols = (int)y.size(1);
    TORCH_CHECK(groups >= 1 && cols % groups == 0, "features must be divisible by num_groups");
    TORCH_CHECK(gamma.numel() == cols && beta.numel() == cols, "GroupNorm weight/bias size mismatch");
    if (y.numel() == 0) return y;
    const bool vec = (cols % 4 == 0) && (reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0);
    const size_t smem = (size_t)cols * sizeof(float);
    const bool use_smem = smem <= 40 * 1024;
    const int threads = 256;
    const unsigned blocks = (unsigned)std::min<long long>(rows, 1LL << 20);
    groupnorm_hardswish_kernel<<<blocks, threads, use_smem ? smem : 0, c10::cuda::getCurrentCUDAStream()>>>(
        y.data_ptr<float>(), gamma.data_ptr<float>(), beta.data_ptr<float>(), rows, cols, (int)groups, (float)eps,
        use_smem, vec);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(name="kb_l2_008_groupnorm_hardswish_c2", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["groupnorm_hardswish_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, num_groups):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.group_norm = nn.GroupNorm(num_groups, out_features)

    def forward(self, x):
        y = F.linear(x.contiguous(), self.linear.weight, self.linear.bias)  # cuBLAS GEMM, fresh output
        gn = self.group_norm
        return _ext.groupnorm_hardswish_(y.contiguous(), gn.weight.contiguous(), gn.bias.contiguous(),
                                         int(gn.num_groups), float(gn.eps))
