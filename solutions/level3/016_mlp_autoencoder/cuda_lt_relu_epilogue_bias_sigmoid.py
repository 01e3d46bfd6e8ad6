"""MLP autoencoder: bias+ReLU in cuBLASLt's GEMM epilogue, and the output layer's bias+sigmoid in one CUDA pass.

Expected win: small but honest (~1-3%): the six fp32 GEMMs (cuBLAS, unchanged, no TF32) dominate; eager adds four
separate ReLU passes over the hidden activations (~170 MiB of traffic) which here vanish into the GEMM epilogue, and
the final layer's bias add and sigmoid share one read-modify-write of the 4096x4096 output.
"""
# Arithmetic: hidden layers relu(x @ W^T + b) (torch._addmm_activation: cuBLASLt's RELU_BIAS epilogue where torch
# uses Lt, else addmm + relu); latent layer addmm; output layer z = x @ W^T (cuBLAS), then in place
# y = 1 / (1 + expf(-(z + b))) in fp32, PyTorch's sigmoid formula.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor bias_sigmoid_(torch::Tensor z, torch::Tensor bias);"

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>

__device__ __forceinline__ float bsig(float z, float b) {
    return 1.0f / (1.0f + expf(-(z + b)));
}

// z: (M, N) row-major, in place. Row r, column c gets bias[c]. Vector path: N % 4 == 0 and 16-byte alignment.
__global__ void __launch_bounds__(256) bias_sigmoid_kernel(float* __restrict__ z, const float* __restrict__ bias,
                                                           int64_t M, int64_t N, int vec) {
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (vec) {
        const int64_t n4 = N >> 2, total4 = M * n4;
        float4* z4 = reinterpret_cast<float4*>(z);
        const float4* b4 = reinterpret_cast<const float4*>(bias);
        for (int64_t i = t; i < total4; i += step) {
            const float4 b = __ldg(b4 + (i % n4));
            float4 v = z4[i];
            v.x = bsig(v.x, b.x); v.y = bsig(v.y, b.y); v.z = bsig(v.z, b.z); v.w = bsig(v.w, b.w);
            z4[i] = v;
        }
    } else {
        const int64_t total = M * N;
        for (int64_t i = t; i < total; i += step) z[i] = bsig(z[i], __ldg(bias + (i % N)));
    }
}

torch::Tensor bias_sigmoid_(torch::Tensor z, torch::Tensor bias) {
    TORCH_CHECK(z.is_cuda() && bias.is_cuda(), "CUDA tensors expected");
    TORCH_CHECK(z.is_contiguous() && bias.is_contiguous(), "contiguous tensors expected");
    TORCH_CHECK(z.scalar_type() == torch::kFloat32 && bias.scalar_type() == torch::kFloat32, "float32 expected");
    TORCH_CHECK(z.dim() == 2 && bias.dim() == 1 && bias.size(0) == z.size(1), "z (M, N) and bias (N) expected");
    const int64_t M = z.size(0), N = z.size(1);
    if (M * N == 0) return z;
    float* zp = z.data_ptr<float>();
    const float* bp = bias.data_ptr<float>();
    const int vec = (N % 4 == 0) && (((reinterpret_cast<uintptr_t>(zp) | reinterpret_cast<uintptr_t>(bp)) & 15) == 0);
    const int threads = 256;
    const int64_t work = vec ? M * N / 4 : M * N;
    const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>((work + threads - 1) / threads, 132LL * 32));
    auto stream = c10::cuda::getCurrentCUDAStream();
    bias_sigmoid_kernel<<<(unsigned)blocks, threads, 0, stream>>>(zp, bp, M, N, vec);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return z;
}
"""

_ext = load_inline(name="kb_l3_016_bias_sigmoid_c3", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["bias_sigmoid_"], extra_cuda_cflags=["-O3"], verbose=False)


def _linear_relu(x, lin):
    if hasattr(torch, "_addmm_activation"):
        return torch._addmm_activation(lin.bias, x, lin.weight.t())
    return F.relu(F.linear(x, lin.weight, lin.bias))


class ModelNew(nn.Module):
    def __init__(self, input_dim, hidden_dims, latent_dim):
        super().__init__()
        enc = []
        prev = input_dim
        for h in hidden_dims:
            enc += [nn.Linear(prev, h), nn.ReLU()]
            prev = h
        enc.append(nn.Linear(prev, latent_dim))
        self.encoder = nn.Sequential(*enc)
        dec = []
        prev = latent_dim
        for h in reversed(hidden_dims):
            dec += [nn.Linear(prev, h), nn.ReLU()]
            prev = h
        dec += [nn.Linear(prev, input_dim), nn.Sigmoid()]
        self.decoder = nn.Sequential(*dec)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                nn.init.zeros_(m.bias)

    def forward(self, x):
        lead = x.shape[:-1]
        h = x.reshape(-1, x.shape[-1]).contiguous()
        mods = list(self.encoder) + list(self.decoder)
        i = 0
        while i < len(mods):
            m = mods[i]
            nxt = mods[i + 1] if i + 1 < len(mods) else None
            if isinstance(m, nn.Linear) and isinstance(nxt, nn.ReLU):
                h = _linear_relu(h, m)
                i += 2
            elif isinstance(m, nn.Linear) and isinstance(nxt, nn.Sigmoid):
                z = torch.mm(h, m.weight.t())                      # cuBLAS, fresh output
                h = _ext.bias_sigmoid_(z.contiguous(), m.bias.contiguous())
                i += 2
            elif isinstance(m, nn.Linear):
                h = F.linear(h, m.weight, m.bias)
                i += 1
            else:
                h = m(h)
                i += 1
        return h.reshape(*lead, h.shape[-1])
