# Keeps the convolution in cuDNN (F.conv2d with the module's own weight and bias), then fuses
# tanh -> * scale -> + per-channel bias -> MaxPool2d(k) into ONE kernel: each thread computes one pooled output,
# applying the elementwise chain to its k x k window on the fly. The 529 MB conv output is read once and only
# the 4x smaller pooled tensor is written; eager PyTorch reads and writes the full-size tensor three times
# (tanh, mul, add) and reads it once more for the pooling.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor tanh_scale_bias_maxpool(torch::Tensor y, torch::Tensor bias, double scale, int64_t k);"

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>
#include <math_constants.h>

// grid.y walks the N*C planes (grid-stride), grid.x / threads walk the pooled plane.
// MaxPool2d(k): stride k, no padding, floor mode.
template <int KC>  // KC > 0: compile-time pool size; KC == 0: runtime k
__global__ void tanh_scale_bias_maxpool_kernel(const float* __restrict__ y, const float* __restrict__ bias,
                                               float* __restrict__ out, long long planes, int C, int H, int W,
                                               int OH, int OW, float scale, int krt) {
    const int k = KC > 0 ? KC : krt;
    const long long opl = (long long)OH * OW;
    for (long long p = blockIdx.y; p < planes; p += gridDim.y) {
        const float b = __ldg(&bias[p % C]);
        const float* src = y + (size_t)p * H * W;
        float* dst = out + (size_t)p * opl;
        for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < opl; o += (long long)gridDim.x * blockDim.x) {
            const int oh = (int)(o / OW), ow = (int)(o % OW);
            const float* win = src + (size_t)(oh * k) * W + (size_t)ow * k;
            float m = -CUDART_INF_F;
            if (KC == 2 && (W % 2 == 0)) {
                // window start (2*oh*W + 2*ow) is even -> 8-byte aligned float2 loads
                float2 r0 = *reinterpret_cast<const float2*>(win);
                float2 r1 = *reinterpret_cast<const float2*>(win + W);
                m = fmaxf(m, tanhf(r0.x) * scale + b);
                m = fmaxf(m, tanhf(r0.y) * scale + b);
                m = fmaxf(m, tanhf(r1.x) * scale + b);
                m = fmaxf(m, tanhf(r1.y) * scale + b);
            } else {
                for (int i = 0; i < k; ++i)
                    for (int j = 0; j < k; ++j)
                        m = fmaxf(m, tanhf(win[(size_t)i * W + j]) * scale + b);
            }
            dst[o] = m;
        }
    }
}

torch::Tensor tanh_scale_bias_maxpool(torch::Tensor y, torch::Tensor bias, double scale, int64_t k) {
    TORCH_CHECK(y.is_cuda() && bias.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(y.is_contiguous() && bias.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32 && bias.scalar_type() == torch::kFloat32, "inputs must be float32");
    TORCH_CHECK(y.dim() == 4, "input must be NCHW");
    TORCH_CHECK(k >= 1, "pool size must be positive");
    const int N = (int)y.size(0), C = (int)y.size(1), H = (int)y.size(2), W = (int)y.size(3);
    TORCH_CHECK(bias.numel() == C, "bias must have one value per channel");
    const int OH = H / (int)k, OW = W / (int)k;
    auto out = torch::empty({N, C, OH, OW}, y.options());
    const long long planes = (long long)N * C;
    const long long opl = (long long)OH * OW;
    if (planes == 0 || opl == 0) return out;
    const int threads = 256;
    long long bx = (opl + threads * 2 - 1) / (threads * 2);  // ~2 outputs per thread
    if (bx < 1) bx = 1;
    if (bx > 65535) bx = 65535;
    dim3 grid((unsigned)bx, (unsigned)std::min<long long>(planes, 65535));
    auto stream = c10::cuda::getCurrentCUDAStream();
    const bool aligned = reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 8 == 0;
    if (k == 2 && aligned)
        tanh_scale_bias_maxpool_kernel<2><<<grid, threads, 0, stream>>>(y.data_ptr<float>(), bias.data_ptr<float>(),
            out.data_ptr<float>(), planes, C, H, W, OH, OW, (float)scale, 2);
    else
        tanh_scale_bias_maxpool_kernel<0><<<grid, threads, 0, stream>>>(y.data_ptr<float>(), bias.data_ptr<float>(),
            out.data_ptr<float>(), planes, C, H, W, OH, OW, (float)scale, (int)k);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(name="kb_l2_026_tanh_scale_bias_maxpool", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["tanh_scale_bias_maxpool"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scaling_factor, bias_shape, pool_kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.scaling_factor = scaling_factor
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.pool_kernel_size = pool_kernel_size

    def forward(self, x):
        c = self.conv
        y = F.conv2d(x.contiguous(), c.weight, c.bias, c.stride, c.padding, c.dilation, c.groups)  # cuDNN
        return _ext.tanh_scale_bias_maxpool(y.contiguous(), self.bias.reshape(-1).contiguous(),
                                            float(self.scaling_factor), int(self.pool_kernel_size))
