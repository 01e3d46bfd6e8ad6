"""ConvTranspose3d in cuDNN; BatchNorm3d (training: batch statistics + running-stat update) fused with AvgPool3d.

Expected win: eager BatchNorm reads the 32x32x32x64x64 conv output (512 MiB) for statistics, reads and writes it to
normalize, then AvgPool3d reads the normalized copy again; here one statistics pass reads it and one fused
normalize+pool pass reads it and writes only the pooled eighth, saving ~1 GiB of HBM traffic (~0.3 ms on an H100).
"""
# Statistics: per (n, c) plane, sum and sum of squares in double (one block per plane), then per channel
# mean = S/cnt, biased var = Q/cnt - mean^2 for normalizing, unbiased var * cnt/(cnt-1) for running_var, and
# running_x = (1 - f) * running_x + f * batch_x with f = momentum (or 1/num_batches_tracked when momentum is
# None), as nn.BatchNorm3d does in training mode. Apply: a = gamma/sqrt(var + eps), b = beta - mean*a (double,
# rounded to fp32), then each pooled voxel is (sum over its k^3 window of x*a + b) / k^3 in fp32 (AvgPool3d without
# padding: the divisor is the window size). In eval mode the running statistics give a and b instead.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = r"""
std::vector<torch::Tensor> bn_batch_scale_shift(torch::Tensor x, torch::Tensor gamma, torch::Tensor beta,
                                                torch::Tensor running_mean, torch::Tensor running_var,
                                                bool update_running, double factor, double eps);
torch::Tensor affine_avgpool3d(torch::Tensor x, torch::Tensor scale, torch::Tensor shift, int64_t kd, int64_t kh,
                               int64_t kw, int64_t sd, int64_t sh, int64_t sw);
"""

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>
#include <vector>

#define CHECK_F32(t) TORCH_CHECK((t).is_cuda(), #t " must be a CUDA tensor"); \
    TORCH_CHECK((t).is_contiguous(), #t " must be contiguous"); \
    TORCH_CHECK((t).scalar_type() == at::kFloat, #t " must be float32")

__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

// One block per (n, c) plane (L contiguous floats): sum and sum of squares in double.
__global__ void __launch_bounds__(256) plane_stats_kernel(const float* __restrict__ x, double* __restrict__ psum,
                                                          double* __restrict__ psq, int64_t L, int vec) {
    const float* p = x + (size_t)blockIdx.x * (size_t)L;
    double s = 0.0, q = 0.0;
    if (vec) {
        const float4* p4 = reinterpret_cast<const float4*>(p);
        const int64_t n4 = L >> 2;
        for (int64_t i = threadIdx.x; i < n4; i += blockDim.x) {
            const float4 v = __ldg(p4 + i);
            const double a = v.x, b = v.y, c = v.z, d = v.w;
            s += (a + b) + (c + d);
            q += (a * a + b * b) + (c * c + d * d);
        }
    } else {
        for (int64_t i = threadIdx.x; i < L; i += blockDim.x) {
            const double a = __ldg(p + i);
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
        if (lane == 0) { psum[blockIdx.x] = s; psq[blockIdx.x] = q; }
    }
}

// Per channel: combine the N plane partials; scale/shift; the running-statistics update.
__global__ void bn_finalize_kernel(const double* __restrict__ psum, const double* __restrict__ psq,
                                   const float* __restrict__ gamma, const float* __restrict__ beta,
                                   float* __restrict__ running_mean, float* __restrict__ running_var,
                                   float* __restrict__ scale, float* __restrict__ shift,
                                   int N, int C, int64_t L, int update, double factor, double eps) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double s = 0.0, q = 0.0;
    for (int n = 0; n < N; ++n) { s += psum[(size_t)n * C + c]; q += psq[(size_t)n * C + c]; }
    const double cnt = (double)N * (double)L;
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

// One thread per pooled voxel: mean over the window of x*scale[c] + shift[c].
__global__ void __launch_bounds__(256) affine_avgpool3d_kernel(
        const float* __restrict__ x, const float* __restrict__ scale, const float* __restrict__ shift,
        float* __restrict__ out, int64_t total, int C, int D, int H, int W, int PD, int PH, int PW,
        int kd, int kh, int kw, int sd, int sh, int sw) {
    const float inv = 1.0f / (float)(kd * kh * kw);
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < total; o += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = o;
        const int ow = (int)(r % PW); r /= PW;
        const int oh = (int)(r % PH); r /= PH;
        const int od = (int)(r % PD); r /= PD;
        const int64_t nc = r;                      // n * C + c
        const int c = (int)(nc % C);
        const float a = __ldg(scale + c), b = __ldg(shift + c);
        const float* p = x + ((size_t)nc * D + (size_t)od * sd) * H * W + (size_t)oh * sh * W + (size_t)ow * sw;
        float s = 0.0f;
        for (int i = 0; i < kd; ++i)
            for (int j = 0; j < kh; ++j) {
                const float* row = p + ((size_t)i * H + j) * W;
                for (int k = 0; k < kw; ++k) s += __ldg(row + k) * a + b;
            }
        out[o] = s * inv;
    }
}

std::vector<torch::Tensor> bn_batch_scale_shift(torch::Tensor x, torch::Tensor gamma, torch::Tensor beta,
                                                torch::Tensor running_mean, torch::Tensor running_var,
                                                bool update_running, double factor, double eps) {
    CHECK_F32(x); CHECK_F32(gamma); CHECK_F32(beta);
    TORCH_CHECK(x.dim() >= 2, "x must be (N, C, ...)");
    const int64_t N = x.size(0), C = x.size(1);
    TORCH_CHECK(gamma.numel() == C && beta.numel() == C, "BN parameter size mismatch");
    if (update_running) {
        CHECK_F32(running_mean); CHECK_F32(running_var);
        TORCH_CHECK(running_mean.numel() == C && running_var.numel() == C, "running stats size mismatch");
    }
    TORCH_CHECK(N * C > 0 && N * C < (1LL << 31), "bad N * C");
    const int64_t L = x.numel() / (N * C);
    TORCH_CHECK(L > 0, "empty planes");
    auto dopt = x.options().dtype(torch::kFloat64);
    auto psum = torch::empty({N * C}, dopt);
    auto psq = torch::empty({N * C}, dopt);
    auto scale = torch::empty({C}, x.options());
    auto shift = torch::empty({C}, x.options());
    auto stream = c10::cuda::getCurrentCUDAStream();
    const float* xp = x.data_ptr<float>();
    const int vec = (L % 4 == 0) && ((reinterpret_cast<uintptr_t>(xp) & 15) == 0);
    plane_stats_kernel<<<(unsigned)(N * C), 256, 0, stream>>>(xp, psum.data_ptr<double>(), psq.data_ptr<double>(),
                                                             L, vec);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    bn_finalize_kernel<<<(unsigned)((C + 127) / 128), 128, 0, stream>>>(
        psum.data_ptr<double>(), psq.data_ptr<double>(), gamma.data_ptr<float>(), beta.data_ptr<float>(),
        update_running ? running_mean.data_ptr<float>() : nullptr,
        update_running ? running_var.data_ptr<float>() : nullptr,
        scale.data_ptr<float>(), shift.data_ptr<float>(), (int)N, (int)C, L, update_running ? 1 : 0, factor, eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return {scale, shift};
}

torch::Tensor affine_avgpool3d(torch::Tensor x, torch::Tensor scale, torch::Tensor shift, int64_t kd, int64_t kh,
                               int64_t kw, int64_t sd, int64_t sh, int64_t sw) {
    CHECK_F32(x); CHECK_F32(scale); CHECK_F32(shift);
    TORCH_CHECK(x.dim() == 5, "x must be NCDHW");
    TORCH_CHECK(kd > 0 && kh > 0 && kw > 0 && sd > 0 && sh > 0 && sw > 0, "bad pooling window");
    const int64_t N = x.size(0), C = x.size(1), D = x.size(2), H = x.size(3), W = x.size(4);
    TORCH_CHECK(scale.numel() == C && shift.numel() == C, "scale/shift size mismatch");
    TORCH_CHECK(D >= kd && H >= kh && W >= kw, "input smaller than the pooling window");
    const int64_t PD = (D - kd) / sd + 1, PH = (H - kh) / sh + 1, PW = (W - kw) / sw + 1;
    auto out = torch::empty({N, C, PD, PH, PW}, x.options());
    const int64_t total = out.numel();
    if (total == 0) return out;
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, 1LL << 30);
    auto stream = c10::cuda::getCurrentCUDAStream();
    affine_avgpool3d_kernel<<<(unsigned)blocks, threads, 0, stream>>>(
        x.data_ptr<float>(), scale.data_ptr<float>(), shift.data_ptr<float>(), out.data_ptr<float>(), total,
        (int)C, (int)D, (int)H, (int)W, (int)PD, (int)PH, (int)PW, (int)kd, (int)kh, (int)kw, (int)sd, (int)sh, (int)sw);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(name="kb_l2_038_bn_avgpool3d_c3", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["bn_batch_scale_shift", "affine_avgpool3d"], extra_cuda_cflags=["-O3"], verbose=False)


def _triple(v):
    return (v, v, v) if isinstance(v, int) else tuple(v)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding, output_padding=output_padding)
        self.batch_norm = nn.BatchNorm3d(out_channels)
        self.avg_pool = nn.AvgPool3d(kernel_size=2)

    def forward(self, x):
        y = self.conv_transpose(x).contiguous()   # cuDNN
        bn, ap = self.batch_norm, self.avg_pool
        k = _triple(ap.kernel_size)
        s = _triple(ap.stride if ap.stride is not None else ap.kernel_size)
        if _triple(ap.padding) != (0, 0, 0) or ap.ceil_mode or ap.divisor_override is not None:
            raise NotImplementedError("fused kernel covers AvgPool3d without padding/ceil_mode/divisor_override")
        use_batch = bn.training or bn.running_mean is None
        if use_batch:
            update = bn.training and bn.track_running_stats and bn.running_mean is not None
            factor = 0.0 if bn.momentum is None else bn.momentum
            if update:
                bn.num_batches_tracked.add_(1)
                if bn.momentum is None:
                    factor = 1.0 / float(bn.num_batches_tracked.item())
            rm = bn.running_mean if update else bn.weight
            rv = bn.running_var if update else bn.weight
            scale, shift = _ext.bn_batch_scale_shift(y, bn.weight.contiguous(), bn.bias.contiguous(), rm, rv,
                                                     update, float(factor), float(bn.eps))
        else:
            scale = (bn.weight / torch.sqrt(bn.running_var + bn.eps)).contiguous()
            shift = (bn.bias - bn.running_mean * scale).contiguous()
        return _ext.affine_avgpool3d(y, scale, shift, k[0], k[1], k[2], s[0], s[1], s[2])
