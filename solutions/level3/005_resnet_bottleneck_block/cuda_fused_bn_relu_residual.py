# ResNet bottleneck block with fused training-mode BatchNorm epilogues.
# The three convolutions (1x1 reduce, 3x3, 1x1 expand) stay in cuDNN (using the module's own
# weights). Everything after each convolution is done by custom kernels:
#   * one reduction pass per BatchNorm: per-(n,c)-plane sum / sum of squares (float4 loads, double
#     accumulation, warp-shuffle block reduction), then a tiny per-channel finalize kernel that turns
#     them into scale = gamma*invstd and shift = beta - mean*scale (biased variance, as in training);
#   * one fused elementwise pass: y = act(x*scale[c] + shift[c] (+ residual)).
# Eager PyTorch runs BN (statistics + normalize), ReLU, residual add and a final ReLU as separate
# full passes; the 256-channel tail (bn3 + add + ReLU on 400 MB) drops from 9 memory passes to 4,
# and bn1/bn2 + ReLU from 5 passes to 3.
# (Running statistics are not updated; the block's output does not depend on them in training mode.)
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = r"""
torch::Tensor bn_act(torch::Tensor x, torch::Tensor res, bool has_res, torch::Tensor gamma,
                     torch::Tensor beta, double eps, int64_t act);
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

__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

// Block-wide sum of two doubles; the result is valid in thread 0.
__device__ __forceinline__ void block_sum2(double& s, double& q) {
    __shared__ double ss[32], sq[32];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    s = warp_sum_d(s); q = warp_sum_d(q);
    if (lane == 0) { ss[wid] = s; sq[wid] = q; }
    __syncthreads();
    const int nw = (blockDim.x + 31) >> 5;
    if (wid == 0) {
        s = lane < nw ? ss[lane] : 0.0;
        q = lane < nw ? sq[lane] : 0.0;
        s = warp_sum_d(s); q = warp_sum_d(q);
    }
}

// One block per (n, c) plane of an NCHW tensor: sum and sum of squares of the plane.
__global__ void plane_stats_kernel(const float* __restrict__ x, double* __restrict__ psum,
                                   double* __restrict__ psq, int HW, int vec) {
    const size_t plane = blockIdx.x;
    const float* p = x + plane * (size_t)HW;
    double s = 0.0, q = 0.0;
    if (vec) {
        const float4* p4 = reinterpret_cast<const float4*>(p);
        const int n4 = HW >> 2;
        for (int i = threadIdx.x; i < n4; i += blockDim.x) {
            const float4 v = __ldg(p4 + i);
            const double a = v.x, b = v.y, c = v.z, d = v.w;
            s += (a + b) + (c + d);
            q += (a * a + b * b) + (c * c + d * d);
        }
    } else {
        for (int i = threadIdx.x; i < HW; i += blockDim.x) {
            const double a = __ldg(p + i);
            s += a; q += a * a;
        }
    }
    block_sum2(s, q);
    if (threadIdx.x == 0) { psum[plane] = s; psq[plane] = q; }
}

// Per channel: combine the N plane partials, biased variance, scale/shift for y = x*scale + shift.
__global__ void bn_finalize_kernel(const double* __restrict__ psum, const double* __restrict__ psq,
                                   const float* __restrict__ gamma, const float* __restrict__ beta,
                                   float* __restrict__ scale, float* __restrict__ shift,
                                   int N, int C, int HW, double eps) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double s = 0.0, q = 0.0;
    for (int n = 0; n < N; ++n) { s += psum[(size_t)n * C + c]; q += psq[(size_t)n * C + c]; }
    const double cnt = (double)N * (double)HW;
    const double mean = s / cnt;
    double var = q / cnt - mean * mean;
    if (var < 0.0) var = 0.0;
    const double a = (double)gamma[c] / sqrt(var + eps);
    scale[c] = (float)a;
    shift[c] = (float)((double)beta[c] - mean * a);
}

__device__ __forceinline__ float activate(float v, int act) {
    if (act == 1) return fmaxf(v, 0.f);
    if (act == 2) return fminf(fmaxf(v, 0.f), 6.f);
    return v;
}

// y = act(x*scale[c] + shift[c] (+ res)), NCHW, grid-stride over float4 (HW % 4 == 0) or scalars.
__global__ void bn_apply_kernel(const float* __restrict__ x, const float* __restrict__ res,
                                float* __restrict__ y, const float* __restrict__ scale,
                                const float* __restrict__ shift, unsigned int total, unsigned int C,
                                unsigned int HW, int has_res, int act, int vec) {
    const unsigned int stride = gridDim.x * blockDim.x;
    if (vec) {
        const unsigned int n4 = total >> 2;
        for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
            const unsigned int c = ((i << 2) / HW) % C;
            const float a = __ldg(scale + c), b = __ldg(shift + c);
            float4 v = __ldg(reinterpret_cast<const float4*>(x) + i);
            v.x = v.x * a + b; v.y = v.y * a + b; v.z = v.z * a + b; v.w = v.w * a + b;
            if (has_res) {
                const float4 r = __ldg(reinterpret_cast<const float4*>(res) + i);
                v.x += r.x; v.y += r.y; v.z += r.z; v.w += r.w;
            }
            v.x = activate(v.x, act); v.y = activate(v.y, act);
            v.z = activate(v.z, act); v.w = activate(v.w, act);
            reinterpret_cast<float4*>(y)[i] = v;
        }
    } else {
        for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
            const unsigned int c = (i / HW) % C;
            float v = __ldg(x + i) * __ldg(scale + c) + __ldg(shift + c);
            if (has_res) v += __ldg(res + i);
            y[i] = activate(v, act);
        }
    }
}

static bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

torch::Tensor bn_act(torch::Tensor x, torch::Tensor res, bool has_res, torch::Tensor gamma,
                     torch::Tensor beta, double eps, int64_t act) {
    CHECK_F32(x); CHECK_F32(gamma); CHECK_F32(beta);
    TORCH_CHECK(x.dim() == 4, "x must be NCHW");
    if (has_res) { CHECK_F32(res); TORCH_CHECK(res.sizes() == x.sizes(), "residual shape mismatch"); }
    const int64_t N = x.size(0), C = x.size(1), HW = x.size(2) * x.size(3);
    TORCH_CHECK(gamma.numel() == C && beta.numel() == C, "BN parameter size mismatch");
    TORCH_CHECK(x.numel() < (int64_t(1) << 31), "tensor too large for 32-bit indexing");
    auto y = torch::empty_like(x);
    auto dopt = x.options().dtype(torch::kFloat64);
    auto psum = torch::empty({N * C}, dopt);
    auto psq = torch::empty({N * C}, dopt);
    auto scale = torch::empty({C}, x.options());
    auto shift = torch::empty({C}, x.options());
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const float* xp = x.data_ptr<float>();
    const float* rp = has_res ? res.data_ptr<float>() : xp;
    float* yp = y.data_ptr<float>();
    const int vec = (HW % 4 == 0) && aligned16(xp) && aligned16(rp) && aligned16(yp);

    plane_stats_kernel<<<(unsigned int)(N * C), 256, 0, stream>>>(xp, psum.data_ptr<double>(),
                                                                    psq.data_ptr<double>(), (int)HW, vec);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    bn_finalize_kernel<<<(unsigned int)((C + 127) / 128), 128, 0, stream>>>(
        psum.data_ptr<double>(), psq.data_ptr<double>(), gamma.data_ptr<float>(), beta.data_ptr<float>(),
        scale.data_ptr<float>(), shift.data_ptr<float>(), (int)N, (int)C, (int)HW, eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const unsigned int total = (unsigned int)x.numel();
    const unsigned int work = vec ? (total >> 2) : total;
    const unsigned int blocks = (work + 255) / 256;
    bn_apply_kernel<<<blocks > 0 ? blocks : 1, 256, 0, stream>>>(
        xp, rp, yp, scale.data_ptr<float>(), shift.data_ptr<float>(), total, (unsigned int)C,
        (unsigned int)HW, has_res ? 1 : 0, (int)act, vec);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="kb_l3_005_resnet_bottleneck_bn_relu",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["bn_act"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)

ACT_NONE, ACT_RELU, ACT_RELU6 = 0, 1, 2


class ModelNew(nn.Module):
    def __init__(self, in_channels, planes, expansion):
        super().__init__()
        width = planes
        self.conv1 = nn.Conv2d(in_channels, width, kernel_size=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, planes * expansion, kernel_size=1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * expansion)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        x = x.contiguous()
        out = self.conv1(x).contiguous()
        out = _ext.bn_act(out, out, False, self.bn1.weight, self.bn1.bias, self.bn1.eps, ACT_RELU)
        out = self.conv2(out).contiguous()
        out = _ext.bn_act(out, out, False, self.bn2.weight, self.bn2.bias, self.bn2.eps, ACT_RELU)
        out = self.conv3(out).contiguous()
        return _ext.bn_act(out, x, True, self.bn3.weight, self.bn3.bias, self.bn3.eps, ACT_RELU)
