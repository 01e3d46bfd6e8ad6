# ConvNeXt block with fused layout-change/normalization epilogues around the cuBLAS GEMMs.
# The depthwise 7x7 conv stays a torch op and the two pointwise Linear layers are plain cuBLAS
# GEMMs (torch.mm with the module's own weights, bias left out). Custom kernels do the rest:
#   * NCHW -> NHWC permute fused with LayerNorm over channels: a block stages a 32-pixel x C tile in
#     shared memory (coalesced reads along W), each warp normalizes one pixel with warp-shuffle
#     mean/variance and writes the row (coalesced along C) - one read + one write;
#   * bias + exact (erf) GELU applied in place on the 4C-wide hidden activations (float4);
#   * bias + layer-scale gamma + NHWC -> NCHW permute + residual add fused in one tiled pass.
# Eager PyTorch makes an extra contiguous copy for the permuted LayerNorm input, a separate gamma
# multiply pass, and a strided (permuted) residual add; this removes ~4 full passes over the
# 100 MB activations. The GEMMs dominate, so expect a modest (~1.1x) gain.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = r"""
torch::Tensor ln_nchw_to_rows(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps);
void bias_gelu_(torch::Tensor h, torch::Tensor b);
torch::Tensor rows_bias_scale_residual(torch::Tensor o, torch::Tensor b, torch::Tensor gamma,
                                       torch::Tensor shortcut);
"""

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <cstdint>

#define CHECK_F32(t) TORCH_CHECK((t).is_cuda(), #t " must be a CUDA tensor"); \
    TORCH_CHECK((t).is_contiguous(), #t " must be contiguous"); \
    TORCH_CHECK((t).scalar_type() == at::kFloat, #t " must be float32")

#define TILE_P 32
#define TILE_LD 33   // padded row stride of the shared tile (conflict-free transposed access)
#define NTHREADS 256

__device__ __forceinline__ float warp_allsum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// x: (N, C, HW) -> out: (N*HW, C) rows, LayerNorm over C with affine w, b.
__global__ void ln_nchw_to_rows_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                       const float* __restrict__ b, float* __restrict__ out,
                                       int C, int HW, float eps) {
    extern __shared__ float tile[];  // C x TILE_LD
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const size_t n = blockIdx.y;
    const int p0 = blockIdx.x * TILE_P;
    const float* xn = x + n * (size_t)C * HW;
    const int p = p0 + lane;
    for (int c = wid; c < C; c += nw)
        tile[c * TILE_LD + lane] = (p < HW) ? __ldg(xn + (size_t)c * HW + p) : 0.f;
    __syncthreads();
    const float invC = 1.f / (float)C;
    for (int pix = wid; pix < TILE_P; pix += nw) {
        const int pp = p0 + pix;
        if (pp >= HW) break;  // warp-uniform
        float s = 0.f;
        for (int c = lane; c < C; c += 32) s += tile[c * TILE_LD + pix];
        const float mean = warp_allsum(s) * invC;
        float q = 0.f;
        for (int c = lane; c < C; c += 32) {
            const float d = tile[c * TILE_LD + pix] - mean;
            q += d * d;
        }
        const float var = warp_allsum(q) * invC;
        const float rstd = 1.f / sqrtf(var + eps);
        float* o = out + (n * HW + pp) * (size_t)C;
        for (int c = lane; c < C; c += 32)
            o[c] = (tile[c * TILE_LD + pix] - mean) * rstd * __ldg(w + c) + __ldg(b + c);
    }
}

// h: (M, D) in place: h = gelu(h + b[col]) with the exact erf GELU.
__global__ void bias_gelu_kernel(float* __restrict__ h, const float* __restrict__ b,
                                 unsigned int total, unsigned int D, int vec) {
    const unsigned int stride = gridDim.x * blockDim.x;
    const float k = 0.70710678118654752440f;
    if (vec) {
        const unsigned int n4 = total >> 2;
        for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
            const unsigned int col = (i << 2) % D;
            float4 v = reinterpret_cast<float4*>(h)[i];
            const float4 bb = __ldg(reinterpret_cast<const float4*>(b + col));
            v.x += bb.x; v.y += bb.y; v.z += bb.z; v.w += bb.w;
            v.x = 0.5f * v.x * (1.f + erff(v.x * k));
            v.y = 0.5f * v.y * (1.f + erff(v.y * k));
            v.z = 0.5f * v.z * (1.f + erff(v.z * k));
            v.w = 0.5f * v.w * (1.f + erff(v.w * k));
            reinterpret_cast<float4*>(h)[i] = v;
        }
    } else {
        for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
            const float v = h[i] + __ldg(b + (i % D));
            h[i] = 0.5f * v * (1.f + erff(v * k));
        }
    }
}

// o: (N*HW, C) rows -> out (N, C, HW): out = shortcut + gamma[c] * (o + b[c]).
__global__ void rows_bias_scale_residual_kernel(const float* __restrict__ o, const float* __restrict__ b,
                                                const float* __restrict__ gamma,
                                                const float* __restrict__ sc, float* __restrict__ out,
                                                int C, int HW) {
    extern __shared__ float tile[];  // C x TILE_LD
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const size_t n = blockIdx.y;
    const int p0 = blockIdx.x * TILE_P;
    for (int pix = wid; pix < TILE_P; pix += nw) {
        const int pp = p0 + pix;
        if (pp >= HW) break;  // warp-uniform
        const float* row = o + (n * HW + pp) * (size_t)C;
        for (int c = lane; c < C; c += 32)
            tile[c * TILE_LD + pix] = __ldg(gamma + c) * (__ldg(row + c) + __ldg(b + c));
    }
    __syncthreads();
    const int p = p0 + lane;
    if (p < HW) {
        for (int c = wid; c < C; c += nw) {
            const size_t idx = (n * C + c) * (size_t)HW + p;
            out[idx] = __ldg(sc + idx) + tile[c * TILE_LD + lane];
        }
    }
}

torch::Tensor ln_nchw_to_rows(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps) {
    CHECK_F32(x); CHECK_F32(w); CHECK_F32(b);
    TORCH_CHECK(x.dim() == 4, "x must be NCHW");
    const int64_t N = x.size(0), C = x.size(1), HW = x.size(2) * x.size(3);
    TORCH_CHECK(w.numel() == C && b.numel() == C, "LayerNorm parameter size mismatch");
    const size_t smem = (size_t)C * TILE_LD * sizeof(float);
    TORCH_CHECK(smem <= 48 * 1024, "too many channels for the shared-memory tile");
    TORCH_CHECK(N <= 65535, "batch too large for gridDim.y");
    auto out = torch::empty({N * HW, C}, x.options());
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    dim3 grid((unsigned int)((HW + TILE_P - 1) / TILE_P), (unsigned int)N);
    ln_nchw_to_rows_kernel<<<grid, NTHREADS, smem, stream>>>(
        x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(),
        (int)C, (int)HW, (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}

void bias_gelu_(torch::Tensor h, torch::Tensor b) {
    CHECK_F32(h); CHECK_F32(b);
    TORCH_CHECK(h.dim() == 2 && b.numel() == h.size(1), "bias size mismatch");
    TORCH_CHECK(h.numel() < (int64_t(1) << 31), "tensor too large for 32-bit indexing");
    const unsigned int D = (unsigned int)h.size(1);
    const unsigned int total = (unsigned int)h.numel();
    const int vec = (D % 4 == 0) && ((reinterpret_cast<uintptr_t>(h.data_ptr<float>()) & 15u) == 0) &&
                    ((reinterpret_cast<uintptr_t>(b.data_ptr<float>()) & 15u) == 0);
    const unsigned int work = vec ? (total >> 2) : total;
    const unsigned int blocks = (work + 255) / 256;
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    bias_gelu_kernel<<<blocks > 0 ? blocks : 1, 256, 0, stream>>>(h.data_ptr<float>(), b.data_ptr<float>(),
                                                                  total, D, vec);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

torch::Tensor rows_bias_scale_residual(torch::Tensor o, torch::Tensor b, torch::Tensor gamma,
                                       torch::Tensor shortcut) {
    CHECK_F32(o); CHECK_F32(b); CHECK_F32(gamma); CHECK_F32(shortcut);
    TORCH_CHECK(shortcut.dim() == 4, "shortcut must be NCHW");
    const int64_t N = shortcut.size(0), C = shortcut.size(1), HW = shortcut.size(2) * shortcut.size(3);
    TORCH_CHECK(o.dim() == 2 && o.size(0) == N * HW && o.size(1) == C, "o must be (N*HW, C)");
    TORCH_CHECK(b.numel() == C && gamma.numel() == C, "bias / gamma size mismatch");
    const size_t smem = (size_t)C * TILE_LD * sizeof(float);
    TORCH_CHECK(smem <= 48 * 1024, "too many channels for the shared-memory tile");
    TORCH_CHECK(N <= 65535, "batch too large for gridDim.y");
    auto out = torch::empty_like(shortcut);
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    dim3 grid((unsigned int)((HW + TILE_P - 1) / TILE_P), (unsigned int)N);
    rows_bias_scale_residual_kernel<<<grid, NTHREADS, smem, stream>>>(
        o.data_ptr<float>(), b.data_ptr<float>(), gamma.data_ptr<float>(), shortcut.data_ptr<float>(),
        out.data_ptr<float>(), (int)C, (int)HW);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="kb_l3_014_convnext_fused_ln_gelu",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["ln_nchw_to_rows", "bias_gelu_", "rows_bias_scale_residual"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim, layer_scale_init_value):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(layer_scale_init_value * torch.ones(dim))

    def forward(self, x):
        x = x.contiguous()
        y = self.dwconv(x).contiguous()
        t = _ext.ln_nchw_to_rows(y, self.norm.weight, self.norm.bias, self.norm.eps)   # (N*H*W, C)
        h = torch.mm(t, self.pwconv1.weight.t())                                        # (N*H*W, 4C)
        _ext.bias_gelu_(h, self.pwconv1.bias)
        o = torch.mm(h, self.pwconv2.weight.t())                                        # (N*H*W, C)
        return _ext.rows_bias_scale_residual(o, self.pwconv2.bias, self.gamma, x)
