"""DenseNet dense block with training-mode BatchNorm+ReLU fused and the torch.cat chain replaced by one feature buffer.

Expected win: eager re-concatenates all previous features for every layer (6 cats of up to 224 channels), runs BN
statistics, normalize and ReLU as separate passes, and recomputes BN1's batch statistics of old channels in every
layer; here each conv output is copied once into a preallocated (N, C_total, H, W) buffer while its per-channel sums
are taken, BN1+ReLU reads that buffer's channel prefix straight into the 1x1 conv's input, and BN2+ReLU is one
statistics pass + one in-place pass -- several GiB less HBM traffic around the 12 unchanged cuDNN convolutions.
"""
# Statistics: sums and sums of squares per (n, c) plane in double, combined per channel (biased variance for
# normalizing, unbiased for running_var, running_x = (1 - f) * running_x + f * batch_x, f = momentum or
# 1/num_batches_tracked when momentum is None; num_batches_tracked += 1), exactly nn.BatchNorm2d's training
# semantics. A channel's batch statistics do not depend on which layer reads it, so a feature channel's plane sums
# are taken once, when it is written to the buffer, and every later layer's BN1 combines them (within this call).
# Apply: a = gamma/sqrt(var + eps), b = beta - mean*a (double -> fp32), y = max(x*a + b, 0) in fp32.
# In eval mode the running statistics give a and b.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = r"""
void plane_sums(torch::Tensor src, torch::Tensor dst, bool copy, int64_t c_off, torch::Tensor psum,
                torch::Tensor psq);
std::vector<torch::Tensor> bn_scale_shift(torch::Tensor psum, torch::Tensor psq, int64_t C, int64_t HW,
                                          torch::Tensor gamma, torch::Tensor beta, torch::Tensor running_mean,
                                          torch::Tensor running_var, bool update, double factor, double eps);
torch::Tensor bn_relu(torch::Tensor src, int64_t C, torch::Tensor scale, torch::Tensor shift, bool inplace);
"""

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>
#include <vector>

__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

// One block per (n, c) plane of src (N, Cs, HW contiguous): double sum / sum of squares into
// psum[n * ldp + c_off + c]; with COPY the plane is also written to dst + n * dstN + (c_off + c) * HW.
template <bool COPY>
__global__ void __launch_bounds__(256) plane_sums_kernel(const float* __restrict__ src, float* __restrict__ dst,
                                                         double* __restrict__ psum, double* __restrict__ psq,
                                                         int Cs, int64_t HW, int64_t dstN, int ldp, int c_off,
                                                         int vec) {
    const int n = blockIdx.x / Cs, c = blockIdx.x - n * Cs;
    const float* p = src + (size_t)blockIdx.x * HW;
    float* d = COPY ? dst + (size_t)n * dstN + (size_t)(c_off + c) * HW : nullptr;
    double s = 0.0, q = 0.0;
    if (vec) {
        const float4* p4 = reinterpret_cast<const float4*>(p);
        const int64_t n4 = HW >> 2;
        for (int64_t i = threadIdx.x; i < n4; i += blockDim.x) {
            const float4 v = __ldg(p4 + i);
            if (COPY) reinterpret_cast<float4*>(d)[i] = v;
            const double a = v.x, b = v.y, e = v.z, f = v.w;
            s += (a + b) + (e + f);
            q += (a * a + b * b) + (e * e + f * f);
        }
    } else {
        for (int64_t i = threadIdx.x; i < HW; i += blockDim.x) {
            const float v = __ldg(p + i);
            if (COPY) d[i] = v;
            const double a = v;
            s += a; q += a * a;
        }
    }
    __shared__ double ss[32], sq[32];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    s = warp_sum_d(s); q = warp_sum_d(q);
    if (lane == 0) { ss[wid] = s; sq[wid] = q; }
    __syncthreads();
    if (wid == 0) {
        const int nw = (blockDim.x + 31) >> 5;
        s = lane < nw ? ss[lane] : 0.0;
        q = lane < nw ? sq[lane] : 0.0;
        s = warp_sum_d(s); q = warp_sum_d(q);
        if (lane == 0) {
            psum[(size_t)n * ldp + c_off + c] = s;
            psq[(size_t)n * ldp + c_off + c] = q;
        }
    }
}

__global__ void bn_finalize_kernel(const double* __restrict__ psum, const double* __restrict__ psq, int ldp,
                                   int N, int C, int64_t HW, const float* __restrict__ gamma,
                                   const float* __restrict__ beta, float* __restrict__ running_mean,
                                   float* __restrict__ running_var, float* __restrict__ scale,
                                   float* __restrict__ shift, int update, double factor, double eps) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double s = 0.0, q = 0.0;
    for (int n = 0; n < N; ++n) { s += psum[(size_t)n * ldp + c]; q += psq[(size_t)n * ldp + c]; }
    const double cnt = (double)N * (double)HW;
    const double mean = s / cnt;
    double var = q / cnt - mean * mean;
    if (var < 0.0) var = 0.0;
    const double a = (double)gamma[c] / sqrt(var + eps);
    scale[c] = (float)a;
    shift[c] = (float)((double)beta[c] - mean * a);
    if (update) {
        const double unbiased = cnt > 1.0 ? var * cnt / (cnt - 1.0) : var;
        running_mean[c] = (float)((1.0 - factor) * (double)running_mean[c] + factor * mean);
        running_var[c] = (float)((1.0 - factor) * (double)running_var[c] + factor * unbiased);
    }
}

// y = max(x * scale[c] + shift[c], 0) over planes (n, c), c < C: x plane at src + n*srcN + c*HW, y plane at
// dst + n*dstN + c*HW (dst may be src). blockIdx.y walks planes, blockIdx.x/threadIdx.x the plane.
__global__ void __launch_bounds__(256) bn_relu_kernel(const float* src, float* dst, int64_t planes, int C,
                                                      int64_t HW, int64_t srcN, int64_t dstN,
                                                      const float* __restrict__ scale,
                                                      const float* __restrict__ shift, int vec) {
    for (int64_t pl = blockIdx.y; pl < planes; pl += gridDim.y) {
        const int64_t n = pl / C;
        const int c = (int)(pl - n * C);
        const float a = __ldg(scale + c), b = __ldg(shift + c);
        const float* xp = src + (size_t)n * srcN + (size_t)c * HW;
        float* yp = dst + (size_t)n * dstN + (size_t)c * HW;
        const int64_t step = (int64_t)gridDim.x * blockDim.x;
        if (vec) {
            const int64_t n4 = HW >> 2;
            for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += step) {
                float4 v = reinterpret_cast<const float4*>(xp)[i];
                v.x = fmaxf(v.x * a + b, 0.0f); v.y = fmaxf(v.y * a + b, 0.0f);
                v.z = fmaxf(v.z * a + b, 0.0f); v.w = fmaxf(v.w * a + b, 0.0f);
                reinterpret_cast<float4*>(yp)[i] = v;
            }
        } else {
            for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < HW; i += step)
                yp[i] = fmaxf(xp[i] * a + b, 0.0f);
        }
    }
}

static void check_f32(const torch::Tensor& t, const char* what) {
    TORCH_CHECK(t.is_cuda(), what, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == torch::kFloat32, what, " must be float32");
}

void plane_sums(torch::Tensor src, torch::Tensor dst, bool copy, int64_t c_off, torch::Tensor psum,
                torch::Tensor psq) {
    check_f32(src, "src");
    TORCH_CHECK(src.is_contiguous() && src.dim() == 4, "src must be contiguous NCHW");
    TORCH_CHECK(psum.is_cuda() && psum.scalar_type() == torch::kFloat64 && psum.is_contiguous() && psum.dim() == 2,
                "psum must be a contiguous (N, ldp) double CUDA tensor");
    TORCH_CHECK(psq.sizes() == psum.sizes() && psq.scalar_type() == torch::kFloat64 && psq.is_contiguous(),
                "psq must match psum");
    const int64_t N = src.size(0), Cs = src.size(1), HW = src.size(2) * src.size(3);
    const int64_t ldp = psum.size(1);
    TORCH_CHECK(psum.size(0) == N && c_off >= 0 && c_off + Cs <= ldp, "psum too small");
    if (N * Cs == 0) return;
    TORCH_CHECK(N * Cs < (1LL << 31), "too many planes");
    int64_t dstN = 0;
    float* dp = nullptr;
    if (copy) {
        check_f32(dst, "dst");
        TORCH_CHECK(dst.is_contiguous() && dst.dim() == 4 && dst.size(0) == N && dst.size(2) * dst.size(3) == HW &&
                    c_off + Cs <= dst.size(1), "dst must be a contiguous (N, >= c_off + Cs, H, W) buffer");
        dstN = dst.size(1) * HW;
        dp = dst.data_ptr<float>();
    }
    const float* sp = src.data_ptr<float>();
    const int vec = (HW % 4 == 0) && ((reinterpret_cast<uintptr_t>(sp) & 15) == 0) &&
                    (!copy || (reinterpret_cast<uintptr_t>(dp) & 15) == 0);
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (copy)
        plane_sums_kernel<true><<<(unsigned)(N * Cs), 256, 0, stream>>>(sp, dp, psum.data_ptr<double>(),
            psq.data_ptr<double>(), (int)Cs, HW, dstN, (int)ldp, (int)c_off, vec);
    else
        plane_sums_kernel<false><<<(unsigned)(N * Cs), 256, 0, stream>>>(sp, dp, psum.data_ptr<double>(),
            psq.data_ptr<double>(), (int)Cs, HW, dstN, (int)ldp, (int)c_off, vec);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

std::vector<torch::Tensor> bn_scale_shift(torch::Tensor psum, torch::Tensor psq, int64_t C, int64_t HW,
                                          torch::Tensor gamma, torch::Tensor beta, torch::Tensor running_mean,
                                          torch::Tensor running_var, bool update, double factor, double eps) {
    TORCH_CHECK(psum.is_cuda() && psum.scalar_type() == torch::kFloat64 && psum.is_contiguous() && psum.dim() == 2,
                "psum must be a contiguous (N, ldp) double CUDA tensor");
    TORCH_CHECK(psq.sizes() == psum.sizes() && psq.scalar_type() == torch::kFloat64 && psq.is_contiguous(),
                "psq must match psum");
    check_f32(gamma, "gamma"); check_f32(beta, "beta");
    TORCH_CHECK(gamma.is_contiguous() && beta.is_contiguous() && gamma.numel() == C && beta.numel() == C,
                "BN parameter size mismatch");
    TORCH_CHECK(C <= psum.size(1), "C larger than the statistics");
    if (update) {
        check_f32(running_mean, "running_mean"); check_f32(running_var, "running_var");
        TORCH_CHECK(running_mean.is_contiguous() && running_var.is_contiguous() && running_mean.numel() == C &&
                    running_var.numel() == C, "running stats size mismatch");
    }
    auto scale = torch::empty({C}, gamma.options());
    auto shift = torch::empty({C}, gamma.options());
    if (C == 0) return {scale, shift};
    auto stream = c10::cuda::getCurrentCUDAStream();
    bn_finalize_kernel<<<(unsigned)((C + 127) / 128), 128, 0, stream>>>(
        psum.data_ptr<double>(), psq.data_ptr<double>(), (int)psum.size(1), (int)psum.size(0), (int)C, HW,
        gamma.data_ptr<float>(), beta.data_ptr<float>(), update ? running_mean.data_ptr<float>() : nullptr,
        update ? running_var.data_ptr<float>() : nullptr, scale.data_ptr<float>(), shift.data_ptr<float>(),
        update ? 1 : 0, factor, eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return {scale, shift};
}

// src: a contiguous (N, Ctot, H, W) tensor; normalizes its first C channels. inplace: into src itself (C must
// then be Ctot); otherwise into a fresh contiguous (N, C, H, W) tensor.
torch::Tensor bn_relu(torch::Tensor src, int64_t C, torch::Tensor scale, torch::Tensor shift, bool inplace) {
    check_f32(src, "src"); check_f32(scale, "scale"); check_f32(shift, "shift");
    TORCH_CHECK(src.is_contiguous() && src.dim() == 4, "src must be contiguous NCHW");
    const int64_t N = src.size(0), Ct = src.size(1), H = src.size(2), W = src.size(3), HW = H * W;
    TORCH_CHECK(C >= 0 && C <= Ct && scale.numel() == C && shift.numel() == C, "channel count mismatch");
    TORCH_CHECK(!inplace || C == Ct, "in place needs every channel");
    torch::Tensor dst = inplace ? src : torch::empty({N, C, H, W}, src.options());
    const int64_t planes = N * C;
    if (planes == 0 || HW == 0) return dst;
    const float* sp = src.data_ptr<float>();
    float* dp = dst.data_ptr<float>();
    const int vec = (HW % 4 == 0) && (((reinterpret_cast<uintptr_t>(sp) | reinterpret_cast<uintptr_t>(dp)) & 15) == 0);
    const int threads = 256;
    const int64_t work = vec ? HW / 4 : HW;
    const int64_t bx = std::max<int64_t>(1, std::min<int64_t>((work + threads - 1) / threads, 65535));
    const dim3 grid((unsigned)bx, (unsigned)std::min<int64_t>(planes, 65535));
    auto stream = c10::cuda::getCurrentCUDAStream();
    bn_relu_kernel<<<grid, threads, 0, stream>>>(sp, dp, planes, (int)C, HW, Ct * HW, (inplace ? Ct : C) * HW,
                                                 scale.data_ptr<float>(), shift.data_ptr<float>(), vec);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return dst;
}
"""

_ext = load_inline(name="kb_l3_013_densenet_bn_relu_c3", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["plane_sums", "bn_scale_shift", "bn_relu"], extra_cuda_cflags=["-O3"], verbose=False)


class DenseLayer(nn.Module):
    def __init__(self, in_channels, growth_rate, bn_size):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(in_channels)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(in_channels, bn_size * growth_rate, kernel_size=1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth_rate)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth_rate, growth_rate, kernel_size=3, padding=1, bias=False)


def _bn_scale_shift(bn, psum, psq, C, HW):
    """scale, shift of BatchNorm `bn` over the first C channels whose plane sums are in psum/psq."""
    if bn.training or bn.running_mean is None:
        update = bn.training and bn.track_running_stats and bn.running_mean is not None
        factor = 0.0 if bn.momentum is None else bn.momentum
        if update:
            bn.num_batches_tracked.add_(1)
            if bn.momentum is None:
                factor = 1.0 / float(bn.num_batches_tracked.item())
        rm = bn.running_mean if update else bn.weight
        rv = bn.running_var if update else bn.weight
        return _ext.bn_scale_shift(psum, psq, C, HW, bn.weight.contiguous(), bn.bias.contiguous(), rm, rv, update,
                                   float(factor), float(bn.eps))
    scale = (bn.weight / torch.sqrt(bn.running_var + bn.eps)).contiguous()
    return scale, (bn.bias - bn.running_mean * scale).contiguous()


class ModelNew(nn.Module):
    def __init__(self, num_layers, in_channels, growth_rate, bn_size):
        super().__init__()
        self.layers = nn.ModuleList(
            [DenseLayer(in_channels + i * growth_rate, growth_rate, bn_size) for i in range(num_layers)]
        )

    def forward(self, x):
        x = x.contiguous()
        N, C0, H, W = x.shape
        HW = H * W
        c_total = C0 + sum(layer.conv2.out_channels for layer in self.layers)
        buf = torch.empty((N, c_total, H, W), device=x.device, dtype=x.dtype)
        psum = torch.empty((N, c_total), device=x.device, dtype=torch.float64)
        psq = torch.empty_like(psum)
        _ext.plane_sums(x, buf, True, 0, psum, psq)            # the concatenation's first block + its sums
        c = C0
        for layer in self.layers:
            s1, b1 = _bn_scale_shift(layer.norm1, psum, psq, c, HW)
            t = _ext.bn_relu(buf, c, s1, b1, False)             # BN1 + ReLU of channels [0, c) of the buffer
            u = layer.conv1(t).contiguous()                      # cuDNN 1x1
            cu = u.shape[1]
            usum = torch.empty((N, cu), device=x.device, dtype=torch.float64)
            usq = torch.empty_like(usum)
            _ext.plane_sums(u, u, False, 0, usum, usq)
            s2, b2 = _bn_scale_shift(layer.norm2, usum, usq, cu, HW)
            u = _ext.bn_relu(u, cu, s2, b2, True)               # BN2 + ReLU in place
            v = layer.conv2(u).contiguous()                      # cuDNN 3x3
            _ext.plane_sums(v, buf, True, c, psum, psq)          # into the buffer + the new channels' sums
            c += v.shape[1]
        return buf
