# LayerNorm over the last dim: one 256-thread block per row keeps the row (D <= 8192) in registers via float4
# loads, computes the mean and then the exact centred variance from registers (two warp-shuffle/shared-memory
# block reductions, no extra memory pass), and writes (x - mean) * rstd * gamma + beta. One read + one write of
# the tensor; eager's vectorized layer_norm kernel is also single-kernel, so expect ~1.1-1.3x (less index
# overhead, streaming loads/stores).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>

constexpr int THREADS = 256;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Block-wide sum, result returned to every thread. red: THREADS/32 floats of shared memory.
__device__ __forceinline__ float block_sum(float v, float* red) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) red[wid] = v;
    __syncthreads();
    float t = (lane < THREADS / 32) ? red[lane] : 0.f;
    t = warp_sum(t);
    __syncthreads();
    return t;
}

// VPT = float4 vectors held per thread; requires D % 4 == 0 and D/4 <= VPT*THREADS.
template <int VPT>
__global__ void __launch_bounds__(THREADS) layernorm_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                                            const float* __restrict__ beta, float* __restrict__ y,
                                                            int D, float eps) {
    __shared__ float red[THREADS / 32];
    const int nvec = D >> 2;
    const int64_t row = blockIdx.x;
    const float4* xr = reinterpret_cast<const float4*>(x + row * D);
    float4* yr = reinterpret_cast<float4*>(y + row * D);
    const float4* g4 = reinterpret_cast<const float4*>(gamma);
    const float4* b4 = reinterpret_cast<const float4*>(beta);

    float4 v[VPT];
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int idx = threadIdx.x + i * THREADS;
        if (idx < nvec) {
            v[i] = __ldcs(xr + idx);
            s += (v[i].x + v[i].y) + (v[i].z + v[i].w);
        } else {
            v[i] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
    }
    const float mean = block_sum(s, red) / (float)D;

    float q = 0.f;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int idx = threadIdx.x + i * THREADS;
        if (idx < nvec) {
            const float a = v[i].x - mean, b = v[i].y - mean, c = v[i].z - mean, d = v[i].w - mean;
            q += a * a + b * b + c * c + d * d;
        }
    }
    const float var = block_sum(q, red) / (float)D;  // biased variance, as nn.LayerNorm
    const float rstd = rsqrtf(var + eps);

#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int idx = threadIdx.x + i * THREADS;
        if (idx < nvec) {
            const float4 g = __ldg(g4 + idx);
            const float4 b = __ldg(b4 + idx);
            float4 o;
            o.x = (v[i].x - mean) * rstd * g.x + b.x;
            o.y = (v[i].y - mean) * rstd * g.y + b.y;
            o.z = (v[i].z - mean) * rstd * g.z + b.z;
            o.w = (v[i].w - mean) * rstd * g.w + b.w;
            __stcs(yr + idx, o);
        }
    }
}

torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor gamma, torch::Tensor beta, double eps) {
    TORCH_CHECK(x.is_cuda() && gamma.is_cuda() && beta.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(x.is_contiguous() && gamma.is_contiguous() && beta.is_contiguous(), "inputs must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && gamma.scalar_type() == torch::kFloat32 &&
                beta.scalar_type() == torch::kFloat32, "inputs must be float32");
    TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension");
    const int64_t D = x.size(-1);
    TORCH_CHECK(gamma.numel() == D && beta.numel() == D, "affine parameters must match the last dimension");
    TORCH_CHECK(D % 4 == 0 && D > 0 && D <= 8 * 4 * THREADS, "last dimension must be a multiple of 4 and <= 8192");
    TORCH_CHECK(((reinterpret_cast<uintptr_t>(x.data_ptr<float>()) | reinterpret_cast<uintptr_t>(gamma.data_ptr<float>()) |
                  reinterpret_cast<uintptr_t>(beta.data_ptr<float>())) & 15) == 0, "inputs must be 16-byte aligned");
    auto y = torch::empty_like(x);
    const int64_t rows = x.numel() / D;
    if (rows == 0) return y;
    TORCH_CHECK(rows <= 2147483647LL, "too many rows");
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (D <= 4 * 4 * THREADS) {
        layernorm_kernel<4><<<(unsigned)rows, THREADS, 0, stream>>>(x.data_ptr<float>(), gamma.data_ptr<float>(),
                                                                   beta.data_ptr<float>(), y.data_ptr<float>(), (int)D, (float)eps);
    } else {
        layernorm_kernel<8><<<(unsigned)rows, THREADS, 0, stream>>>(x.data_ptr<float>(), gamma.data_ptr<float>(),
                                                                   beta.data_ptr<float>(), y.data_ptr<float>(), (int)D, (float)eps);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_src = "torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor gamma, torch::Tensor beta, double eps);"

_ext = load_inline(
    name="kb_l1_030_layernorm_rowreg",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["layernorm_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.ln = nn.LayerNorm(hidden)
        with torch.no_grad():
            self.ln.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return _ext.layernorm_forward(x.contiguous(), self.ln.weight.contiguous(), self.ln.bias.contiguous(),
                                      float(self.ln.eps))
