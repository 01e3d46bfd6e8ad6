# Keeps the transposed convolution in cuDNN (F.conv_transpose2d with the module's own weight and bias), then
# fuses + per-channel bias -> clamp[0,1] -> * scale -> clamp[0,1] -> / scale into ONE vectorized (float4),
# in-place kernel; the grid walks (n, c) planes so the bias is loaded once per plane. Eager PyTorch runs five
# kernels that each read and write the 537 MB activation; fused it is read and written once.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor bias_clamp_scale_(torch::Tensor y, torch::Tensor bias, double scale);"

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>

__device__ __forceinline__ float chain(float v, float b, float s) {
    v = v + b;
    v = fminf(fmaxf(v, 0.0f), 1.0f);
    v = v * s;
    v = fminf(fmaxf(v, 0.0f), 1.0f);
    return v / s;
}

template <bool VEC>
__global__ void bias_clamp_scale_kernel(float* __restrict__ y, const float* __restrict__ bias,
                                        long long planes, int C, long long S, float s) {
    for (long long p = blockIdx.y; p < planes; p += gridDim.y) {
        const float b = __ldg(&bias[p % C]);
        float* dst = y + (size_t)p * S;
        const long long stride = (long long)gridDim.x * blockDim.x;
        if (VEC) {
            float4* d4 = reinterpret_cast<float4*>(dst);
            const long long S4 = S >> 2;
            for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < S4; j += stride) {
                float4 v = d4[j];
                v.x = chain(v.x, b, s);
                v.y = chain(v.y, b, s);
                v.z = chain(v.z, b, s);
                v.w = chain(v.w, b, s);
                d4[j] = v;
            }
        } else {
            for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < S; j += stride)
                dst[j] = chain(dst[j], b, s);
        }
    }
}

torch::Tensor bias_clamp_scale_(torch::Tensor y, torch::Tensor bias, double scale) {
    TORCH_CHECK(y.is_cuda() && bias.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(y.is_contiguous() && bias.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32 && bias.scalar_type() == torch::kFloat32, "inputs must be float32");
    TORCH_CHECK(y.dim() >= 2, "input must be (N, C, ...)");
    const long long N = y.size(0), C = y.size(1);
    TORCH_CHECK(bias.numel() == C, "bias must have one value per channel");
    if (y.numel() == 0) return y;
    const long long planes = N * C;
    const long long S = y.numel() / planes;
    const bool vec = (S % 4 == 0) && (reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0);
    const int threads = 256;
    const long long work = vec ? S / 4 : S;
    long long bx = (work + threads * 4 - 1) / (threads * 4);  // ~4 items per thread
    if (bx < 1) bx = 1;
    if (bx > 65535) bx = 65535;
    dim3 grid((unsigned)bx, (unsigned)std::min<long long>(planes, 65535));
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (vec)
        bias_clamp_scale_kernel<true><<<grid, threads, 0, stream>>>(y.data_ptr<float>(), bias.data_ptr<float>(),
                                                                    planes, (int)C, S, (float)scale);
    else
        bias_clamp_scale_kernel<false><<<grid, threads, 0, stream>>>(y.data_ptr<float>(), bias.data_ptr<float>(),
                                                                     planes, (int)C, S, (float)scale);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(name="kb_l2_035_convt2d_bias_clamp_scale", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["bias_clamp_scale_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding, bias_shape,
                 scaling_factor):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding, output_padding=output_padding)
        self.bias = nn.Parameter(torch.randn(bias_shape) * 0.2)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        ct = self.conv_transpose
        y = F.conv_transpose2d(x.contiguous(), ct.weight, ct.bias, ct.stride, ct.padding, ct.output_padding,
                               ct.groups, ct.dilation)  # cuDNN
        return _ext.bias_clamp_scale_(y.contiguous(), self.bias.reshape(-1).contiguous(), float(self.scaling_factor))
