"""ConvTranspose2d in cuDNN, then Mish -> + add_value -> hardtanh[-1, 1] -> * scale as ONE in-place float4 CUDA pass.

Expected win: eager runs four elementwise kernels (mish, add, hardtanh, mul), each reading and writing the
128x64x128x128 activation (512 MiB); the fused kernel reads and writes it once, saving ~3 GiB of HBM traffic
(~1 ms on an H100) next to a transposed convolution that stays identical.
"""
# Arithmetic per element, fp32, in the reference's order: m = v * tanh(log1p(exp(v))) (PyTorch's Mish kernel),
# m + add_value, clamp to [-1, 1], * scale.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor mish_add_hardtanh_scale_(torch::Tensor y, double add_value, double lo, double hi, double scale);"

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>

__device__ __forceinline__ float epi(float v, float add, float lo, float hi, float scale) {
    v = v * tanhf(log1pf(expf(v)));        // F.mish
    v = v + add;                           // + add_value
    v = fminf(fmaxf(v, lo), hi);           // F.hardtanh
    return v * scale;                      // * scale
}

// Grid-stride over float4s [0, n4) of y, in place; then the scalar elements [start, n).
__global__ void __launch_bounds__(256) mish_epi_kernel(float* __restrict__ y, int64_t n4, int64_t start, int64_t n,
                                                       float add, float lo, float hi, float scale) {
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    float4* y4 = reinterpret_cast<float4*>(y);
    for (int64_t i = t; i < n4; i += step) {
        float4 v = y4[i];
        v.x = epi(v.x, add, lo, hi, scale); v.y = epi(v.y, add, lo, hi, scale);
        v.z = epi(v.z, add, lo, hi, scale); v.w = epi(v.w, add, lo, hi, scale);
        y4[i] = v;
    }
    for (int64_t j = start + t; j < n; j += step) y[j] = epi(y[j], add, lo, hi, scale);
}

torch::Tensor mish_add_hardtanh_scale_(torch::Tensor y, double add_value, double lo, double hi, double scale) {
    TORCH_CHECK(y.is_cuda(), "y must be a CUDA tensor");
    TORCH_CHECK(y.is_contiguous(), "y must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32, "y must be float32");
    const int64_t n = y.numel();
    if (n == 0) return y;
    float* yp = y.data_ptr<float>();
    const bool aligned = (reinterpret_cast<uintptr_t>(yp) & 15) == 0;
    const int64_t n4 = aligned ? n / 4 : 0;
    const int64_t start = n4 * 4;
    const int threads = 256;
    const int64_t work = std::max<int64_t>(n4, n - start);
    // enough blocks to fill the card several times over; the grid-stride loop covers the rest
    const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>((work + threads - 1) / threads, 132LL * 32));
    auto stream = c10::cuda::getCurrentCUDAStream();
    mish_epi_kernel<<<(unsigned)blocks, threads, 0, stream>>>(yp, n4, start, n, (float)add_value, (float)lo,
                                                              (float)hi, (float)scale);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(name="kb_l2_040_mish_add_hardtanh_scale_c3", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["mish_add_hardtanh_scale_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, add_value, scale):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding)
        self.add_value = add_value
        self.scale = scale

    def forward(self, x):
        y = self.conv_transpose(x).contiguous()   # cuDNN, a fresh tensor: the epilogue may overwrite it
        return _ext.mish_add_hardtanh_scale_(y, float(self.add_value), -1.0, 1.0, float(self.scale))
