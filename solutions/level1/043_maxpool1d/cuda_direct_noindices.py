# MaxPool1d (values only): one thread per output over a 2-D grid (output positions x rows, so no index
# division), window loop fully unrolled for kernel sizes 2-4 (any other size, stride, padding, dilation and
# ceil_mode via the runtime loop), read-only cached loads so the 2x-overlapping windows are served from L1;
# NaN propagates as in PyTorch. On CUDA, eager max_pool1d always goes through max_pool2d_with_indices and also
# writes an int64 index per output (1 GiB here, twice the 0.5 GiB output): ~2.5 GiB of traffic vs 1.5 GiB here,
# so expect ~1.5x.
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
#include <vector>

constexpr int THREADS = 256;

// PyTorch's pooling_output_shape (floor division; ceil mode drops a window that would start in the right padding)
static int64_t pool_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
    const int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
    int64_t out = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
    if (ceil_mode && (out - 1) * s >= in + p) --out;
    return out;
}

// grid (ceil(OL / THREADS), min(rows, 65535)); K > 0: compile-time kernel size (dilation still runtime)
template <int K>
__global__ void __launch_bounds__(THREADS) maxpool1d_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                            int64_t rows, int L, int OL, int k, int s, int p, int d) {
    const int kk = K > 0 ? K : k;
    const int o = blockIdx.x * THREADS + threadIdx.x;
    if (o >= OL) return;
    const int start = o * s - p;
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        const float* xr = x + r * L;
        float m = -INFINITY;
#pragma unroll
        for (int j = 0; j < kk; ++j) {
            const int pos = start + j * d;
            if (pos >= 0 && pos < L) {
                const float v = __ldg(xr + pos);
                if (v > m || isnan(v)) m = v;  // NaN propagates, as in PyTorch
            }
        }
        y[r * OL + o] = m;
    }
}

// x (..., L) contiguous: pools the last dimension
torch::Tensor maxpool1d_forward(torch::Tensor x, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    TORCH_CHECK(x.dim() >= 1, "x must have a length dimension");
    TORCH_CHECK(k > 0 && s > 0 && d > 0 && p >= 0 && p <= ((k - 1) * d + 1) / 2, "invalid pooling parameters");
    const int64_t L = x.size(-1);
    const int64_t OL = pool_out_size(L, k, s, p, d, ceil_mode);
    TORCH_CHECK(OL > 0, "output size is too small");
    TORCH_CHECK(L < (1LL << 30) && OL * s < (1LL << 30), "length too large for 32-bit positions");
    std::vector<int64_t> osize(x.sizes().begin(), x.sizes().end());
    osize.back() = OL;
    auto y = torch::empty(osize, x.options());
    if (y.numel() == 0) return y;
    const int64_t rows = x.numel() / L;
    dim3 grid((unsigned)((OL + THREADS - 1) / THREADS), (unsigned)std::min<int64_t>(rows, 65535));
    auto stream = c10::cuda::getCurrentCUDAStream();
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
#define KB_LAUNCH(KS) maxpool1d_kernel<KS><<<grid, THREADS, 0, stream>>>(xp, yp, rows, (int)L, (int)OL, (int)k, (int)s, (int)p, (int)d)
    if (k == 2) KB_LAUNCH(2); else if (k == 3) KB_LAUNCH(3); else if (k == 4) KB_LAUNCH(4); else KB_LAUNCH(0);
#undef KB_LAUNCH
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_src = "torch::Tensor maxpool1d_forward(torch::Tensor x, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode);"

_ext = load_inline(
    name="kb_l1_043_maxpool1d_direct",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["maxpool1d_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


def _single(v):
    if isinstance(v, (tuple, list)):
        assert len(v) == 1
        return int(v[0])
    return int(v)


class ModelNew(nn.Module):
    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.pool = nn.MaxPool1d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x):
        pool = self.pool
        assert not pool.return_indices
        k = _single(pool.kernel_size)
        s = _single(pool.stride if pool.stride is not None else pool.kernel_size)
        return _ext.maxpool1d_forward(x.contiguous(), k, s, _single(pool.padding), _single(pool.dilation),
                                      bool(pool.ceil_mode))
