# Fused x * scale + y: one grid-stride elementwise kernel with float4 streaming loads/stores (one read of x
# and y, one write of the result). Eager runs x * scale and then + y as two kernels with a 1 GiB temporary:
# ~5 GiB of traffic vs 3 GiB here, so expect ~1.6x.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>

// Vector part: float4 elements [0, n4); scalar part: elements [start, n) (the tail, or everything if unaligned).
__global__ void __launch_bounds__(256) axpy_kernel(const float4* __restrict__ x4, const float4* __restrict__ y4,
                                                   float4* __restrict__ o4, int64_t n4,
                                                   const float* __restrict__ x, const float* __restrict__ y,
                                                   float* __restrict__ o, int64_t start, int64_t n, float scale) {
    const int64_t stride = (int64_t)blockDim.x * gridDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
#pragma unroll 2
    for (int64_t i = tid; i < n4; i += stride) {
        const float4 a = __ldcs(x4 + i);
        const float4 b = __ldcs(y4 + i);
        float4 r;
        r.x = a.x * scale + b.x;
        r.y = a.y * scale + b.y;
        r.z = a.z * scale + b.z;
        r.w = a.w * scale + b.w;
        __stcs(o4 + i, r);
    }
    for (int64_t i = start + tid; i < n; i += stride) o[i] = x[i] * scale + y[i];
}

torch::Tensor scale_add_forward(torch::Tensor x, torch::Tensor y, double scale) {
    TORCH_CHECK(x.is_cuda() && y.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(x.is_contiguous() && y.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && y.scalar_type() == torch::kFloat32, "inputs must be float32");
    TORCH_CHECK(x.sizes() == y.sizes(), "shapes must match");
    auto out = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n == 0) return out;
    const float* xp = x.data_ptr<float>();
    const float* yp = y.data_ptr<float>();
    float* op = out.data_ptr<float>();
    const bool aligned = ((reinterpret_cast<uintptr_t>(xp) | reinterpret_cast<uintptr_t>(yp) |
                           reinterpret_cast<uintptr_t>(op)) & 15) == 0;
    const int64_t n4 = aligned ? n / 4 : 0;
    const int64_t start = n4 * 4;
    int sms = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, x.get_device()));
    const int threads = 256;
    const int64_t work = std::max<int64_t>(n4, n - start);
    const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>((work + threads - 1) / threads, (int64_t)sms * 16));
    auto stream = c10::cuda::getCurrentCUDAStream();
    axpy_kernel<<<(unsigned)blocks, threads, 0, stream>>>(
        reinterpret_cast<const float4*>(xp), reinterpret_cast<const float4*>(yp), reinterpret_cast<float4*>(op), n4,
        xp, yp, op, start, n, (float)scale);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_src = "torch::Tensor scale_add_forward(torch::Tensor x, torch::Tensor y, double scale);"

_ext = load_inline(
    name="kb_l1_058_scale_add_axpy",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["scale_add_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        return _ext.scale_add_forward(x.contiguous(), y.contiguous(), float(self.scale))
