# Fused |x - y|: one grid-stride float4 kernel reads x and y once and writes |x - y| (fabsf of the fp32
# difference, exactly eager's two ops) with streaming loads/stores, scalar tail for sizes that are not a
# multiple of 4 or unaligned data. Eager runs sub (read 2, write 1 temporary) then abs (read 1, write 1): 5
# passes over 1 GiB tensors vs 3 here, so expect ~1.6x.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>

constexpr int THREADS = 256;

__device__ __forceinline__ float4 absdiff4(const float4 a, const float4 b) {
    return make_float4(fabsf(a.x - b.x), fabsf(a.y - b.y), fabsf(a.z - b.z), fabsf(a.w - b.w));
}

// float4 part: [0, n4) vectors; scalar part: elements [start, n)
__global__ void __launch_bounds__(THREADS) absdiff_kernel(const float4* __restrict__ x4, const float4* __restrict__ y4,
                                                          float4* __restrict__ o4, int64_t n4,
                                                          const float* __restrict__ x, const float* __restrict__ y,
                                                          float* __restrict__ o, int64_t start, int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * THREADS;
    const int64_t tid = (int64_t)blockIdx.x * THREADS + threadIdx.x;
    int64_t i = tid;
    for (; i + stride < n4; i += 2 * stride) {  // two independent vector pairs in flight
        const float4 a0 = __ldcs(x4 + i), b0 = __ldcs(y4 + i);
        const float4 a1 = __ldcs(x4 + i + stride), b1 = __ldcs(y4 + i + stride);
        __stcs(o4 + i, absdiff4(a0, b0));
        __stcs(o4 + i + stride, absdiff4(a1, b1));
    }
    for (; i < n4; i += stride) __stcs(o4 + i, absdiff4(__ldcs(x4 + i), __ldcs(y4 + i)));
    for (int64_t j = start + tid; j < n; j += stride) o[j] = fabsf(x[j] - y[j]);
}

torch::Tensor absdiff_forward(torch::Tensor x, torch::Tensor y) {
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
    const int64_t work = std::max<int64_t>(n4, n - start);
    const int blocks = (int)std::max<int64_t>(1, std::min<int64_t>((work + THREADS - 1) / THREADS, (int64_t)sms * 16));
    auto stream = c10::cuda::getCurrentCUDAStream();
    absdiff_kernel<<<blocks, THREADS, 0, stream>>>(reinterpret_cast<const float4*>(xp), reinterpret_cast<const float4*>(yp),
                                                   reinterpret_cast<float4*>(op), n4, xp, yp, op, start, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_src = "torch::Tensor absdiff_forward(torch::Tensor x, torch::Tensor y);"

_ext = load_inline(
    name="kb_l1_060_absdiff_fused",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["absdiff_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        if x.shape != y.shape:  # broadcasting: materialize the common shape (the reference broadcasts too)
            x, y = torch.broadcast_tensors(x, y)
        return _ext.absdiff_forward(x.contiguous(), y.contiguous())
