# MaxPool2d (NCHW, dilation 1, floor mode): one thread per output, window loops fully unrolled for the
# common kernel sizes (2, 3) with read-only cached loads; overlapping windows are served from L1/L2, so DRAM
# traffic is ~one read of the input plus the output. Eager CUDA max_pool2d goes through
# max_pool2d_with_indices and also writes an int64 index per output (0.5 GiB here, twice the output), so
# expect ~1.3-1.4x.
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

// K > 0: compile-time kernel size; K == 0: runtime kernel size k. IdxT: 32-bit index math when all indices
// (incl. the grid stride) stay below 2^32 (cheap div/mod), 64-bit otherwise.
template <int K, typename IdxT>
__global__ void __launch_bounds__(THREADS) maxpool2d_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                            int64_t total, int H, int W, int OH, int OW,
                                                            int k, int s, int p) {
    const int kk = K > 0 ? K : k;
    const IdxT stride = (IdxT)gridDim.x * THREADS;
    for (IdxT idx = (IdxT)blockIdx.x * THREADS + threadIdx.x; idx < (IdxT)total; idx += stride) {
        const int ow = (int)(idx % (IdxT)OW);
        const IdxT t = idx / (IdxT)OW;
        const int oh = (int)(t % (IdxT)OH);
        const IdxT nc = t / (IdxT)OH;
        const float* xp = x + (int64_t)nc * H * W;
        const int h0 = oh * s - p, w0 = ow * s - p;
        float m = -INFINITY;
#pragma unroll
        for (int kh = 0; kh < kk; ++kh) {  // kk is a compile-time constant when K > 0: fully unrolled
            const int h = h0 + kh;
            if (h < 0 || h >= H) continue;
            const float* rp = xp + (int64_t)h * W;
#pragma unroll
            for (int kw = 0; kw < kk; ++kw) {
                const int w = w0 + kw;
                if (w < 0 || w >= W) continue;
                const float v = __ldg(rp + w);
                if (v > m || isnan(v)) m = v;  // NaN propagates, as in PyTorch
            }
        }
        y[idx] = m;
    }
}

torch::Tensor maxpool2d_forward(torch::Tensor x, int64_t k, int64_t s, int64_t p) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.is_contiguous(), "x must be contiguous (NCHW)");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    TORCH_CHECK(x.dim() == 4, "x must be NCHW");
    TORCH_CHECK(k > 0 && s > 0 && p >= 0 && 2 * p <= k, "invalid pooling parameters");
    const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
    const int64_t OH = (H + 2 * p - k) / s + 1;
    const int64_t OW = (W + 2 * p - k) / s + 1;
    TORCH_CHECK(OH > 0 && OW > 0, "output size is too small");
    auto y = torch::empty({N, C, OH, OW}, x.options());
    const int64_t total = y.numel();
    if (total == 0) return y;
    int sms = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, x.get_device()));
    const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>((total + THREADS - 1) / THREADS, (int64_t)sms * 32));
    auto stream = c10::cuda::getCurrentCUDAStream();
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
#define KB_LAUNCH(KS, IT) maxpool2d_kernel<KS, IT><<<(unsigned)blocks, THREADS, 0, stream>>>( \
        xp, yp, total, (int)H, (int)W, (int)OH, (int)OW, (int)k, (int)s, (int)p)
    // 32-bit path needs idx + stride < 2^32 (no wrap-around in the grid-stride loop)
    const bool small = total + blocks * THREADS < 4294967295LL;
    if (small) {
        if (k == 3) KB_LAUNCH(3, uint32_t); else if (k == 2) KB_LAUNCH(2, uint32_t); else KB_LAUNCH(0, uint32_t);
    } else {
        if (k == 3) KB_LAUNCH(3, int64_t); else if (k == 2) KB_LAUNCH(2, int64_t); else KB_LAUNCH(0, int64_t);
    }
#undef KB_LAUNCH
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_src = "torch::Tensor maxpool2d_forward(torch::Tensor x, int64_t k, int64_t s, int64_t p);"

_ext = load_inline(
    name="kb_l1_044_maxpool2d_direct",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["maxpool2d_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


def _single(v):
    if isinstance(v, (tuple, list)):
        assert all(e == v[0] for e in v), "only square pooling parameters are supported"
        return int(v[0])
    return int(v)


class ModelNew(nn.Module):
    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x):
        assert _single(self.pool.dilation) == 1 and not self.pool.ceil_mode
        k = _single(self.pool.kernel_size)
        s = _single(self.pool.stride if self.pool.stride is not None else self.pool.kernel_size)
        p = _single(self.pool.padding)
        return _ext.maxpool2d_forward(x.contiguous(), k, s, p)
