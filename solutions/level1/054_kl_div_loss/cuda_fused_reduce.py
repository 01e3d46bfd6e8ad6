# Fused KL divergence (reduction='batchmean'): one grid-stride kernel reads predictions and targets once with
# float4 loads and accumulates xlogy(t, t) - t * log(p) per element in fp32 (exactly F.kl_div's pointwise
# formula applied to input = log(p): a zero target contributes 0 unless log(p) is -inf, where PyTorch gives
# NaN too), reduces per block (warp shuffles + shared memory) into one partial per block, and a one-block
# kernel sums the partials in double in a fixed order and divides by the batch size (deterministic, no
# atomics). Eager materializes log(p), xlogy(t, t), t * input and their difference (four 1 GiB temporaries)
# before the sum: ~10 GiB of traffic vs 2 GiB here, so expect ~4x.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>
#include <cmath>

constexpr int THREADS = 256;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// pointwise KL term for input = log(p): xlogy(t, t) - t * log(p); xlogy(0, y) = 0, NaN t propagates
__device__ __forceinline__ float kl_term(float p, float t) {
    const float xl = (t == 0.f) ? 0.f : t * logf(t);
    return xl - t * logf(p);
}

// Vector part: float4 elements [0, n4); scalar part: elements [start, n) (the tail, or everything if unaligned).
__global__ void __launch_bounds__(THREADS) kl_partial_kernel(const float4* __restrict__ p4, const float4* __restrict__ t4,
                                                             int64_t n4, const float* __restrict__ p,
                                                             const float* __restrict__ t, int64_t start, int64_t n,
                                                             float* __restrict__ partials) {
    __shared__ float red[THREADS / 32];
    const int64_t stride = (int64_t)gridDim.x * THREADS;
    const int64_t tid = (int64_t)blockIdx.x * THREADS + threadIdx.x;
    float acc = 0.f;
    int64_t i = tid;
    for (; i + stride < n4; i += 2 * stride) {  // two independent float4 pairs in flight per iteration
        const float4 a0 = __ldcs(p4 + i), b0 = __ldcs(t4 + i);
        const float4 a1 = __ldcs(p4 + i + stride), b1 = __ldcs(t4 + i + stride);
        acc += (kl_term(a0.x, b0.x) + kl_term(a0.y, b0.y)) + (kl_term(a0.z, b0.z) + kl_term(a0.w, b0.w));
        acc += (kl_term(a1.x, b1.x) + kl_term(a1.y, b1.y)) + (kl_term(a1.z, b1.z) + kl_term(a1.w, b1.w));
    }
    for (; i < n4; i += stride) {
        const float4 a = __ldcs(p4 + i), b = __ldcs(t4 + i);
        acc += (kl_term(a.x, b.x) + kl_term(a.y, b.y)) + (kl_term(a.z, b.z) + kl_term(a.w, b.w));
    }
    for (int64_t j = start + tid; j < n; j += stride) acc += kl_term(p[j], t[j]);

    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    acc = warp_sum(acc);
    if (lane == 0) red[wid] = acc;
    __syncthreads();
    if (wid == 0) {
        float v = (lane < THREADS / 32) ? red[lane] : 0.f;
        v = warp_sum(v);
        if (lane == 0) partials[blockIdx.x] = v;
    }
}

// One block: fixed-order double-precision sum of the per-block partials, times scale.
__global__ void __launch_bounds__(THREADS) finalize_kernel(const float* __restrict__ partials, int nparts,
                                                           double scale, float* __restrict__ out) {
    __shared__ double red[THREADS / 32];
    double acc = 0.0;
    for (int i = threadIdx.x; i < nparts; i += THREADS) acc += (double)partials[i];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    acc = warp_sum_d(acc);
    if (lane == 0) red[wid] = acc;
    __syncthreads();
    if (wid == 0) {
        double v = (lane < THREADS / 32) ? red[lane] : 0.0;
        v = warp_sum_d(v);
        if (lane == 0) out[0] = (float)(v * scale);
    }
}

// sum over all elements of xlogy(t, t) - t * log(p), times scale
torch::Tensor kl_forward(torch::Tensor pred, torch::Tensor target, double scale) {
    TORCH_CHECK(pred.is_cuda() && target.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(pred.is_contiguous() && target.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(pred.scalar_type() == torch::kFloat32 && target.scalar_type() == torch::kFloat32, "inputs must be float32");
    TORCH_CHECK(pred.sizes() == target.sizes(), "shapes must match");
    const int64_t n = pred.numel();
    auto out = torch::empty({}, pred.options());
    if (n == 0) { out.fill_(0.f); out.mul_(scale); return out; }  // empty sum (times scale: inf*0 -> NaN as eager)
    const float* pp = pred.data_ptr<float>();
    const float* tp = target.data_ptr<float>();
    const bool aligned = ((reinterpret_cast<uintptr_t>(pp) | reinterpret_cast<uintptr_t>(tp)) & 15) == 0;
    const int64_t n4 = aligned ? n / 4 : 0;
    const int64_t start = n4 * 4;
    int sms = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, pred.get_device()));
    const int64_t work = std::max<int64_t>(n4, n - start);
    const int blocks = (int)std::max<int64_t>(1, std::min<int64_t>((work + THREADS - 1) / THREADS, (int64_t)sms * 8));
    auto partials = torch::empty({blocks}, pred.options());
    auto stream = c10::cuda::getCurrentCUDAStream();
    kl_partial_kernel<<<blocks, THREADS, 0, stream>>>(reinterpret_cast<const float4*>(pp), reinterpret_cast<const float4*>(tp),
                                                      n4, pp, tp, start, n, partials.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    finalize_kernel<<<1, THREADS, 0, stream>>>(partials.data_ptr<float>(), blocks, scale, out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_src = "torch::Tensor kl_forward(torch::Tensor pred, torch::Tensor target, double scale);"

_ext = load_inline(
    name="kb_l1_054_kl_div_fused",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["kl_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        # F.kl_div(log(p), t, reduction='batchmean') = sum(xlogy(t, t) - t * log(p)) / p.size(0)
        assert predictions.shape == targets.shape
        batch = predictions.size(0) if predictions.dim() > 0 else 1
        return _ext.kl_forward(predictions.contiguous(), targets.contiguous(), 1.0 / batch if batch else float("inf"))
