# AvgPool3d (NCDHW): one thread per output with a 3-D grid (32 x 8 output tile of one output depth slice per
# block, (plane, depth) pairs on z), the 3x3x3 window fully unrolled with read-only cached loads (the
# overlapping windows are served from L1/L2, so DRAM sees ~one read of the input), and exactly PyTorch's
# arithmetic: fp32 sum in (t, h, w) order divided by the same divisor (count_include_pad window clipped to the
# padded extent, the in-bounds count, or divisor_override). The op is HBM-bound (1 GiB in, 128 MiB out) and
# eager is one kernel too, so expect ~1.05-1.3x from cheaper index math and a full-occupancy launch.
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

constexpr int TX = 32, TY = 8;

// PyTorch's pooling_output_shape (floor division; ceil mode drops a window that would start in the right padding)
static int64_t pool_out_size(int64_t in, int64_t k, int64_t s, int64_t p, bool ceil_mode) {
    const int64_t num = in + 2 * p - (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
    int64_t out = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
    if (ceil_mode && (out - 1) * s >= in + p) --out;
    return out;
}

struct P3 { int k[3], s[3], p[3]; };  // (t, h, w)

// grid (ceil(OW / TX), ceil(OH / TY), min(planes * OD, 65535)); K > 0: compile-time cubic kernel size
template <int K>
__global__ void __launch_bounds__(TX * TY) avgpool3d_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                            int64_t planes, int D, int H, int W, int OD, int OH, int OW,
                                                            P3 prm, bool count_include_pad, int divisor_override) {
    const int KT = K > 0 ? K : prm.k[0], KH = K > 0 ? K : prm.k[1], KW = K > 0 ? K : prm.k[2];
    const int ow = blockIdx.x * TX + threadIdx.x;
    const int oh = blockIdx.y * TY + threadIdx.y;
    if (ow >= OW || oh >= OH) return;
    const int hstart0 = oh * prm.s[1] - prm.p[1], wstart0 = ow * prm.s[2] - prm.p[2];
    const int hend0 = min(hstart0 + KH, H + prm.p[1]), wend0 = min(wstart0 + KW, W + prm.p[2]);
    const int hstart = max(hstart0, 0), wstart = max(wstart0, 0);
    const int hend = min(hend0, H), wend = min(wend0, W);
    const int64_t HW = (int64_t)H * W, DHW = (int64_t)D * HW;
    const int64_t total_z = planes * OD;
    for (int64_t z = blockIdx.z; z < total_z; z += gridDim.z) {
        const int64_t pl = z / OD;
        const int od = (int)(z - pl * OD);
        // the same window bookkeeping as PyTorch's avg_pool3d kernel
        const int tstart0 = od * prm.s[0] - prm.p[0];
        const int tend0 = min(tstart0 + KT, D + prm.p[0]);
        const int pool_size = (tend0 - tstart0) * (hend0 - hstart0) * (wend0 - wstart0);
        const int tstart = max(tstart0, 0), tend = min(tend0, D);
        float out = 0.f;
        if (tstart < tend && hstart < hend && wstart < wend) {
            const float* xp = x + pl * DHW;
            float sum = 0.f;
#pragma unroll
            for (int a = 0; a < KT; ++a) {
                const int t = tstart0 + a;
                if (t < tstart || t >= tend) continue;
#pragma unroll
                for (int i = 0; i < KH; ++i) {
                    const int h = hstart0 + i;
                    if (h < hstart || h >= hend) continue;
                    const float* rp = xp + (int64_t)t * HW + (int64_t)h * W;
#pragma unroll
                    for (int j = 0; j < KW; ++j) {
                        const int w = wstart0 + j;
                        if (w >= wstart && w < wend) sum += __ldg(rp + w);  // (t, h, w) order, as the reference
                    }
                }
            }
            const int divide_factor = divisor_override ? divisor_override
                                    : (count_include_pad ? pool_size : (tend - tstart) * (hend - hstart) * (wend - wstart));
            out = sum / (float)divide_factor;
        }
        y[z * ((int64_t)OH * OW) + (int64_t)oh * OW + ow] = out;
    }
}

torch::Tensor avgpool3d_forward(torch::Tensor x, std::vector<int64_t> k, std::vector<int64_t> s, std::vector<int64_t> p,
                                bool ceil_mode, bool count_include_pad, int64_t divisor_override) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.is_contiguous(), "x must be contiguous (NCDHW)");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    TORCH_CHECK(x.dim() == 4 || x.dim() == 5, "x must be (N, C, D, H, W) or (C, D, H, W)");
    TORCH_CHECK(k.size() == 3 && s.size() == 3 && p.size() == 3, "expected 3 kernel/stride/padding values");
    P3 prm;
    int64_t in[3] = {x.size(-3), x.size(-2), x.size(-1)}, out[3];
    for (int i = 0; i < 3; ++i) {
        TORCH_CHECK(k[i] > 0 && s[i] > 0 && p[i] >= 0 && p[i] <= k[i] / 2, "invalid pooling parameters");
        out[i] = pool_out_size(in[i], k[i], s[i], p[i], ceil_mode);
        TORCH_CHECK(out[i] > 0, "output size is too small");
        TORCH_CHECK(in[i] < (1LL << 30) && out[i] * s[i] < (1LL << 30), "sizes too large");
        prm.k[i] = (int)k[i]; prm.s[i] = (int)s[i]; prm.p[i] = (int)p[i];
    }
    std::vector<int64_t> osize(x.sizes().begin(), x.sizes().end());
    for (int i = 0; i < 3; ++i) osize[osize.size() - 3 + i] = out[i];
    auto y = torch::empty(osize, x.options());
    if (y.numel() == 0) return y;
    const int64_t planes = x.numel() / (in[0] * in[1] * in[2]);
    dim3 block(TX, TY);
    dim3 grid((unsigned)((out[2] + TX - 1) / TX), (unsigned)((out[1] + TY - 1) / TY),
              (unsigned)std::min<int64_t>(planes * out[0], 65535));
    TORCH_CHECK(grid.y <= 65535, "output too tall");
    auto stream = c10::cuda::getCurrentCUDAStream();
#define KB_LAUNCH(KS) avgpool3d_kernel<KS><<<grid, block, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), planes, \
        (int)in[0], (int)in[1], (int)in[2], (int)out[0], (int)out[1], (int)out[2], prm, count_include_pad, (int)divisor_override)
    const bool cubic = k[0] == k[1] && k[1] == k[2];
    if (cubic && k[0] == 3) KB_LAUNCH(3);
    else if (cubic && k[0] == 2) KB_LAUNCH(2);
    else KB_LAUNCH(0);
#undef KB_LAUNCH
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_src = ("torch::Tensor avgpool3d_forward(torch::Tensor x, std::vector<int64_t> k, std::vector<int64_t> s, "
           "std::vector<int64_t> p, bool ceil_mode, bool count_include_pad, int64_t divisor_override);")

_ext = load_inline(
    name="kb_l1_048_avgpool3d_direct",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["avgpool3d_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


def _triple(v):
    if isinstance(v, (tuple, list)):
        assert len(v) == 3
        return [int(e) for e in v]
    return [int(v)] * 3


class ModelNew(nn.Module):
    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.pool = nn.AvgPool3d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x):
        pool = self.pool
        k = _triple(pool.kernel_size)
        s = _triple(pool.stride if pool.stride is not None else pool.kernel_size)
        p = _triple(pool.padding)
        div = int(pool.divisor_override) if pool.divisor_override else 0
        return _ext.avgpool3d_forward(x.contiguous(), k, s, p, bool(pool.ceil_mode), bool(pool.count_include_pad), div)
