# AvgPool1d: one thread per output over a 2-D grid (output positions x rows: no div/mod chain per output as in
# eager's avg_pool2d kernel, which avg_pool1d runs on an unsqueezed (N, C, 1, L) view), window loop fully
# unrolled for kernel sizes 2, 3, 4, 8 with read-only cached loads (overlapping windows come from L1), and
# exactly PyTorch's arithmetic: fp32 sum in window order divided by the same divisor (count_include_pad window
# clipped to the padded extent, or the in-bounds count). The op is HBM-bound (2 GiB in, 0.5 GiB out) and eager
# is one kernel too, so expect only ~1.05-1.2x from the cheaper index math and fewer instructions per load.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>
#include <vector>

constexpr int THREADS = 256;

// PyTorch's pooling_output_shape (floor division; ceil mode drops a window that would start in the right padding)
static int64_t pool_out_size(int64_t in, int64_t k, int64_t s, int64_t p, bool ceil_mode) {
    const int64_t num = in + 2 * p - (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
    int64_t out = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
    if (ceil_mode && (out - 1) * s >= in + p) --out;
    return out;
}

// grid (ceil(OL / THREADS), min(rows, 65535)); K > 0: compile-time kernel size
template <int K>
__global__ void __launch_bounds__(THREADS) avgpool1d_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                            int64_t rows, int L, int OL, int k, int s, int p,
                                                            bool count_include_pad) {
    const int kk = K > 0 ? K : k;
    const int o = blockIdx.x * THREADS + threadIdx.x;
    if (o >= OL) return;
    // the same window bookkeeping as PyTorch's avg_pool2d kernel (the height dimension is 1 here)
    const int wstart0 = o * s - p;
    const int wend0 = min(wstart0 + kk, L + p);
    const int pool_size = wend0 - wstart0;
    const int wstart = max(wstart0, 0);
    const int wend = min(wend0, L);
    const int divide_factor = count_include_pad ? pool_size : (wend - wstart);
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        const float* xr = x + r * L;
        float out = 0.f;
        if (wstart < wend) {
            float sum = 0.f;
#pragma unroll
            for (int j = 0; j < kk; ++j) {
                const int w = wstart0 + j;
                if (w >= wstart && w < wend) sum += __ldg(xr + w);  // ascending order, as the reference
            }
            out = sum / (float)divide_factor;
        }
        y[r * OL + o] = out;
    }
}

// x (..., L) contiguous: pools the last dimension
torch::Tensor avgpool1d_forward(torch::Tensor x, int64_t k, int64_t s, int64_t p, bool ceil_mode, bool count_include_pad) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    TORCH_CHECK(x.dim() >= 1, "x must have a length dimension");
    TORCH_CHECK(k > 0 && s > 0 && p >= 0 && p <= k / 2, "invalid pooling parameters");
    const int64_t L = x.size(-1);
    const int64_t OL = pool_out_size(L, k, s, p, ceil_mode);
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
#define KB_LAUNCH(KS) avgpool1d_kernel<KS><<<grid, THREADS, 0, stream>>>(xp, yp, rows, (int)L, (int)OL, (int)k, (int)s, (int)p, count_include_pad)
    switch (k) {
        case 2: KB_LAUNCH(2); break;
        case 3: KB_LAUNCH(3); break;
        case 4: KB_LAUNCH(4); break;
        case 8: KB_LAUNCH(8); break;
        default: KB_LAUNCH(0); break;
    }
#undef KB_LAUNCH
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_src = "torch::Tensor avgpool1d_forward(torch::Tensor x, int64_t k, int64_t s, int64_t p, bool ceil_mode, bool count_include_pad);"

_ext = load_inline(
    name="kb_l1_046_avgpool1d_direct",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["avgpool1d_forward"],
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
        self.pool = nn.AvgPool1d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x):
        pool = self.pool
        k = _single(pool.kernel_size)
        s = _single(pool.stride if pool.stride is not None else pool.kernel_size)
        return _ext.avgpool1d_forward(x.contiguous(), k, s, _single(pool.padding), bool(pool.ceil_mode),
                                      bool(pool.count_include_pad))
