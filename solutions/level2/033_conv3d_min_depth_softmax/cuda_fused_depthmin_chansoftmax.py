"""Conv3d in cuDNN, then min over depth and softmax over channels in ONE CUDA kernel (a thread per (n, h, w)).

Expected win: eager's torch.min(dim=2) reads the 16x32x14x126x126 conv output (434 MiB) and writes values AND int64
indices (the indices alone 62 MiB), then softmax reads/writes the 31 MiB map in its own launch; the fused kernel
reads the conv output once, never forms the indices, and keeps the softmax in the same pass.
"""
# Per (n, h, w): for each channel c, m_c = min over d of y[n, c, d, h, w] (torch.min's comparison: NaN wins),
# written straight to the output while the channel max M is tracked; then s = sum_c expf(m_c - M) (fp32, channel
# order) and out[c] = expf(m_c - M) / s (PyTorch's softmax epilogue). The min is over dim 2 (depth), the
# reference's setting; ModelNew falls back to the reference's ops for any other `dim`.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor depthmin_chansoftmax(torch::Tensor y);"

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>

__global__ void __launch_bounds__(256) depthmin_chansoftmax_kernel(
        const float* __restrict__ y, float* __restrict__ out, int64_t total, int C, int D, int64_t HW) {
    const int64_t DHW = (int64_t)D * HW;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < total; o += (int64_t)gridDim.x * blockDim.x) {
        const int64_t n = o / HW, hw = o - n * HW;
        const float* src = y + (size_t)n * C * DHW + hw;
        float* dst = out + (size_t)n * C * HW + hw;
        float M = -INFINITY;
        for (int c = 0; c < C; ++c) {
            const float* q = src + (size_t)c * DHW;
            float m = __ldg(q);
            #pragma unroll 4
            for (int d = 1; d < D; ++d) {
                const float v = __ldg(q + (size_t)d * HW);
                m = (v < m || isnan(v)) ? v : m;
            }
            dst[(size_t)c * HW] = m;
            M = fmaxf(M, m);
        }
        float s = 0.0f;
        for (int c = 0; c < C; ++c) s += expf(dst[(size_t)c * HW] - M);
        for (int c = 0; c < C; ++c) dst[(size_t)c * HW] = expf(dst[(size_t)c * HW] - M) / s;
    }
}

torch::Tensor depthmin_chansoftmax(torch::Tensor y) {
    TORCH_CHECK(y.is_cuda(), "y must be a CUDA tensor");
    TORCH_CHECK(y.is_contiguous(), "y must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32, "y must be float32");
    TORCH_CHECK(y.dim() == 5, "y must be NCDHW");
    const int64_t N = y.size(0), C = y.size(1), D = y.size(2), H = y.size(3), W = y.size(4);
    TORCH_CHECK(D > 0, "min over an empty dimension");
    auto out = torch::empty({N, C, H, W}, y.options());
    const int64_t total = N * H * W;
    if (total == 0 || C == 0) return out;
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, 1LL << 30);
    auto stream = c10::cuda::getCurrentCUDAStream();
    depthmin_chansoftmax_kernel<<<(unsigned)blocks, threads, 0, stream>>>(
        y.data_ptr<float>(), out.data_ptr<float>(), total, (int)C, (int)D, H * W);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(name="kb_l2_033_depthmin_chansoftmax_c3", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["depthmin_chansoftmax"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, dim):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.dim = dim

    def forward(self, x):
        y = self.conv(x)   # cuDNN
        if self.dim not in (2, -3) or y.dim() != 5:
            return torch.softmax(torch.min(y, dim=self.dim)[0], dim=1)   # outside the fused kernel's layout
        return _ext.depthmin_chansoftmax(y.contiguous())
