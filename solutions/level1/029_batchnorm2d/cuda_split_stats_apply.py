# Training-mode BatchNorm2d in three kernels: (1) a split statistics pass where each channel's N*H*W elements
# are spread over ~SMs*8/C blocks (eager/cuDNN-style per-channel reductions give only C = 64 blocks the whole
# 1 GiB read), each thread accumulating shifted sums sum(x - k), sum((x - k)^2) (k = the channel's first
# element, so the variance does not cancel catastrophically) over float4 loads and each block reducing in
# double; (2) a per-channel finalize in double that also updates running_mean / running_var (unbiased) exactly
# like nn.BatchNorm2d; (3) a float4 apply pass y = (x - mean) * (gamma * rstd) + beta that walks the tensor in
# reverse order, so its first reads hit the tail that pass (1) left in L2. Two reads + one write, as eager, but
# with the whole GPU busy in the statistics pass: expect ~1.2-1.5x. Sizes not a multiple of 4 or unaligned
# data use scalar loops; eval mode with running statistics normalizes with those instead.
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
constexpr int NWARPS = THREADS / 32;
constexpr int64_t PART = 16384;  // elements of one plane per statistics work unit
constexpr int ITEMS = 4;         // apply pass: float4 (or 4 scalars) per thread per item
constexpr int64_t CHUNK = (int64_t)THREADS * 4 * ITEMS;  // apply pass: elements per block

__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// grid (C, S). Block (c, s) handles work units u = s, s + S, ... of channel c; unit u = (n = u / P, part = u % P)
// covers plane (n, c) elements [part * PART, min(HW, part * PART + PART)). Writes partials[(c * S + s) * 2 + {0, 1}]
// = sum(x - k), sum((x - k)^2) with k = x[0, c, 0].
template <bool VEC>
__global__ void __launch_bounds__(THREADS) bn_stats_kernel(const float* __restrict__ x, int64_t N, int64_t C,
                                                           int64_t HW, int64_t P, double* __restrict__ partials) {
    __shared__ double red[2][NWARPS];
    const int64_t c = blockIdx.x;
    const int S = gridDim.y, s = blockIdx.y;
    const float k = __ldg(x + c * HW);
    float s1 = 0.f, s2 = 0.f;
    const int64_t U = N * P;
    for (int64_t u = s; u < U; u += S) {
        const int64_t n = u / P, part = u - n * P;
        const float* plane = x + (n * C + c) * HW;
        const int64_t i0 = part * PART, i1 = min(i0 + PART, HW);
        if (VEC) {
            const float4* p4 = reinterpret_cast<const float4*>(plane);
            const int64_t e4 = i1 >> 2;
            int64_t j = (i0 >> 2) + threadIdx.x;
            for (; j + 3 * THREADS < e4; j += 4 * THREADS) {
                float4 q[4];
#pragma unroll
                for (int t = 0; t < 4; ++t) q[t] = __ldg(p4 + j + t * THREADS);
#pragma unroll
                for (int t = 0; t < 4; ++t) {
                    const float a = q[t].x - k, b = q[t].y - k, cc = q[t].z - k, d = q[t].w - k;
                    s1 += (a + b) + (cc + d);
                    s2 += (a * a + b * b) + (cc * cc + d * d);
                }
            }
            for (; j < e4; j += THREADS) {
                const float4 q = __ldg(p4 + j);
                const float a = q.x - k, b = q.y - k, cc = q.z - k, d = q.w - k;
                s1 += (a + b) + (cc + d);
                s2 += (a * a + b * b) + (cc * cc + d * d);
            }
        } else {
            for (int64_t i = i0 + threadIdx.x; i < i1; i += THREADS) {
                const float a = __ldg(plane + i) - k;
                s1 += a;
                s2 += a * a;
            }
        }
    }
    double d1 = warp_sum_d((double)s1), d2 = warp_sum_d((double)s2);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    if (lane == 0) { red[0][wid] = d1; red[1][wid] = d2; }
    __syncthreads();
    if (threadIdx.x == 0) {
        double t1 = 0.0, t2 = 0.0;
        for (int w = 0; w < NWARPS; ++w) { t1 += red[0][w]; t2 += red[1][w]; }
        partials[(c * S + s) * 2 + 0] = t1;
        partials[(c * S + s) * 2 + 1] = t2;
    }
}

// one thread per channel: mean, biased variance -> (mean, scale = gamma * rstd); running-stat update.
__global__ void bn_finalize_kernel(const float* __restrict__ x, const double* __restrict__ partials, int S, int64_t C,
                                   int64_t HW, int64_t M, const float* __restrict__ w, const float* __restrict__ b,
                                   float* __restrict__ running_mean, float* __restrict__ running_var, double momentum,
                                   double eps, float* __restrict__ mean_out, float* __restrict__ scale_out,
                                   float* __restrict__ shift_out) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double t1 = 0.0, t2 = 0.0;
    for (int s = 0; s < S; ++s) { t1 += partials[(c * S + s) * 2]; t2 += partials[(c * S + s) * 2 + 1]; }
    const double k = (double)x[c * HW];
    const double m1 = t1 / (double)M;
    const double var = fmax(t2 / (double)M - m1 * m1, 0.0);
    const double mean = k + m1;
    const double rstd = 1.0 / sqrt(var + eps);
    const float g = w ? w[c] : 1.f;
    mean_out[c] = (float)mean;
    scale_out[c] = (float)((double)g * rstd);
    shift_out[c] = b ? b[c] : 0.f;
    if (running_mean != nullptr) {
        const double unbiased = M > 1 ? var * (double)M / (double)(M - 1) : var;
        running_mean[c] = (float)((1.0 - momentum) * (double)running_mean[c] + momentum * mean);
        running_var[c] = (float)((1.0 - momentum) * (double)running_var[c] + momentum * unbiased);
    }
}

// y = (x - mean[c]) * scale[c] + shift[c]. grid (chunks per plane, min(NC, 65535)); walks planes and chunks in
// reverse order. Chunk = CHUNK elements: VEC -> ITEMS float4 per thread, else ITEMS * 4 scalars per thread.
template <bool VEC>
__global__ void __launch_bounds__(THREADS) bn_apply_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                           const float* __restrict__ mean, const float* __restrict__ scale,
                                                           const float* __restrict__ shift, int64_t NC, int64_t C,
                                                           int64_t HW) {
    const int64_t nchunks = gridDim.x;
    const int64_t chunk = nchunks - 1 - blockIdx.x;
    for (int64_t py = blockIdx.y; py < NC; py += gridDim.y) {
        const int64_t plane = NC - 1 - py;
        const int64_t c = plane % C;
        const float mu = __ldg(mean + c), sc = __ldg(scale + c), sh = __ldg(shift + c);
        const float* xp = x + plane * HW;
        float* yp = y + plane * HW;
        if (VEC) {
            const float4* x4 = reinterpret_cast<const float4*>(xp);
            float4* y4 = reinterpret_cast<float4*>(yp);
            const int64_t HW4 = HW >> 2;
            const int64_t base = chunk * (CHUNK / 4) + threadIdx.x;
            float4 q[ITEMS];
#pragma unroll
            for (int t = 0; t < ITEMS; ++t) {
                const int64_t j = base + t * THREADS;
                if (j < HW4) q[t] = __ldcs(x4 + j);
            }
#pragma unroll
            for (int t = 0; t < ITEMS; ++t) {
                const int64_t j = base + t * THREADS;
                if (j < HW4) {
                    float4 o;
                    o.x = (q[t].x - mu) * sc + sh;
                    o.y = (q[t].y - mu) * sc + sh;
                    o.z = (q[t].z - mu) * sc + sh;
                    o.w = (q[t].w - mu) * sc + sh;
                    __stcs(y4 + j, o);
                }
            }
        } else {
            const int64_t base = chunk * CHUNK + threadIdx.x;
#pragma unroll
            for (int t = 0; t < 4 * ITEMS; ++t) {
                const int64_t i = base + t * THREADS;
                if (i < HW) yp[i] = (xp[i] - mu) * sc + sh;
            }
        }
    }
}

// x (N, C, *) contiguous. Training mode (use_batch_stats): statistics over N and the spatial dims per channel;
// running stats (if given) updated in place with `momentum`. Otherwise the given running stats are used.
torch::Tensor batch_norm_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, torch::Tensor running_mean,
                                 torch::Tensor running_var, bool use_batch_stats, double momentum, double eps) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    TORCH_CHECK(x.dim() >= 2, "x must be (N, C, ...)");
    const int64_t N = x.size(0), C = x.size(1);
    const bool affine = w.defined() && w.numel() > 0;
    const bool track = running_mean.defined() && running_mean.numel() > 0;
    auto check_vec = [&](const torch::Tensor& t, const char* name) {
        TORCH_CHECK(t.is_cuda() && t.is_contiguous() && t.scalar_type() == torch::kFloat32 && t.numel() == C,
                    name, " must be a contiguous float32 CUDA tensor with C elements");
    };
    if (affine) { check_vec(w, "weight"); check_vec(b, "bias"); }
    if (track) { check_vec(running_mean, "running_mean"); check_vec(running_var, "running_var"); }
    TORCH_CHECK(use_batch_stats || track, "eval mode needs running statistics");
    auto y = torch::empty_like(x);
    if (x.numel() == 0) return y;
    const int64_t HW = x.numel() / (N * C);
    const int64_t M = N * HW;
    auto opts = x.options();
    auto mean = torch::empty({C}, opts), scale = torch::empty({C}, opts), shift = torch::empty({C}, opts);
    auto stream = c10::cuda::getCurrentCUDAStream();
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const bool vec = (HW % 4 == 0) && (((reinterpret_cast<uintptr_t>(xp) | reinterpret_cast<uintptr_t>(yp)) & 15) == 0);

    if (use_batch_stats) {
        TORCH_CHECK(C <= 2147483647LL, "too many channels");
        int sms = 0;
        C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, x.get_device()));
        const int64_t P = (HW + PART - 1) / PART;
        const int64_t U = N * P;
        const int64_t target = (int64_t)sms * 8;
        const int S = (int)std::max<int64_t>(1, std::min<int64_t>({(target + C - 1) / C, U, 65535}));
        auto partials = torch::empty({C * S * 2}, opts.dtype(torch::kFloat64));
        dim3 grid((unsigned)C, (unsigned)S);
        if (vec) bn_stats_kernel<true><<<grid, THREADS, 0, stream>>>(xp, N, C, HW, P, partials.data_ptr<double>());
        else bn_stats_kernel<false><<<grid, THREADS, 0, stream>>>(xp, N, C, HW, P, partials.data_ptr<double>());
        C10_CUDA_KERNEL_LAUNCH_CHECK();
        bn_finalize_kernel<<<(unsigned)((C + 127) / 128), 128, 0, stream>>>(
            xp, partials.data_ptr<double>(), S, C, HW, M, affine ? w.data_ptr<float>() : nullptr,
            affine ? b.data_ptr<float>() : nullptr, track ? running_mean.data_ptr<float>() : nullptr,
            track ? running_var.data_ptr<float>() : nullptr, momentum, eps, mean.data_ptr<float>(),
            scale.data_ptr<float>(), shift.data_ptr<float>());
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    } else {
        // eval: y = (x - running_mean) * gamma / sqrt(running_var + eps) + beta
        mean.copy_(running_mean);
        auto r = torch::rsqrt(running_var + eps);
        scale.copy_(affine ? r * w : r);
        if (affine) shift.copy_(b); else shift.zero_();
    }
    const int64_t NC = N * C;
    const int64_t nchunks = (HW + CHUNK - 1) / CHUNK;
    TORCH_CHECK(nchunks <= 2147483647LL, "planes too large");
    dim3 agrid((unsigned)nchunks, (unsigned)std::min<int64_t>(NC, 65535));
    if (vec) bn_apply_kernel<true><<<agrid, THREADS, 0, stream>>>(xp, yp, mean.data_ptr<float>(), scale.data_ptr<float>(),
                                                                  shift.data_ptr<float>(), NC, C, HW);
    else bn_apply_kernel<false><<<agrid, THREADS, 0, stream>>>(xp, yp, mean.data_ptr<float>(), scale.data_ptr<float>(),
                                                               shift.data_ptr<float>(), NC, C, HW);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_src = ("torch::Tensor batch_norm_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, torch::Tensor running_mean, "
           "torch::Tensor running_var, bool use_batch_stats, double momentum, double eps);")

_ext = load_inline(
    name="kb_l1_029_batchnorm_split_stats",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["batch_norm_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features)
        with torch.no_grad():
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        bn = self.bn
        empty = torch.empty(0, device=x.device, dtype=x.dtype)
        # same decisions (and running-stat bookkeeping) as nn.modules.batchnorm._BatchNorm.forward
        eaf = 0.0 if bn.momentum is None else bn.momentum
        if bn.training and bn.track_running_stats and bn.num_batches_tracked is not None:
            bn.num_batches_tracked.add_(1)
            eaf = 1.0 / float(bn.num_batches_tracked) if bn.momentum is None else bn.momentum
        use_batch_stats = bn.training or (bn.running_mean is None and bn.running_var is None)
        # running stats are updated only when they exist and batch statistics are used (training)
        update = bn.training and bn.running_mean is not None
        rm = bn.running_mean if (update or not use_batch_stats) else empty
        rv = bn.running_var if (update or not use_batch_stats) else empty
        w = bn.weight.contiguous() if bn.affine else empty
        b = bn.bias.contiguous() if bn.affine else empty
        return _ext.batch_norm_forward(x.contiguous(), w, b, rm, rv, use_batch_stats, float(eaf), float(bn.eps))
