"""VGG-BN stack: training-mode BatchNorm+ReLU fused after each cuDNN conv, and BN+ReLU+MaxPool2d fused per stage.

Expected win: eager runs, per conv, a BN statistics pass, a normalize pass (read + write), an in-place ReLU pass and,
after every second conv, a max-pool pass; here each conv's output gets one statistics pass and one fused pass
(in place, or reading the full map and writing only the pooled quarter) -- about 1.5 GiB less HBM traffic around
six unchanged cuDNN convolutions; the classifier's bias+ReLU goes into cuBLASLt's GEMM epilogue.
"""
# Statistics: per (n, c) plane sums and sums of squares in double, combined per channel (biased variance for
# normalizing, unbiased for running_var; running_x = (1 - f) * running_x + f * batch_x with f = momentum, or
# 1/num_batches_tracked when momentum is None; num_batches_tracked += 1) -- nn.BatchNorm2d's training semantics.
# Apply: a = gamma/sqrt(var + eps), b = beta - mean*a (double -> fp32), y = max(x*a + b, 0) in fp32; with the
# pool, the 2x2 / stride-2 (floor) window maximum of those values. In eval mode the running statistics give a, b.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = r"""
std::vector<torch::Tensor> bn_batch_scale_shift(torch::Tensor x, torch::Tensor gamma, torch::Tensor beta,
                                                torch::Tensor running_mean, torch::Tensor running_var,
                                                bool update_running, double factor, double eps);
torch::Tensor bn_relu_(torch::Tensor x, torch::Tensor scale, torch::Tensor shift);
torch::Tensor bn_relu_maxpool2(torch::Tensor x, torch::Tensor scale, torch::Tensor shift);
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

// In place y = max(x*scale[c] + shift[c], 0); blockIdx.y walks (n, c) planes, x/threads the plane.
__global__ void __launch_bounds__(256) bn_relu_kernel(float* __restrict__ x, int64_t planes, int C, int64_t HW,
                                                      const float* __restrict__ scale,
                                                      const float* __restrict__ shift, int vec) {
    for (int64_t pl = blockIdx.y; pl < planes; pl += gridDim.y) {
        const int c = (int)(pl % C);
        const float a = __ldg(scale + c), b = __ldg(shift + c);
        float* p = x + (size_t)pl * HW;
        const int64_t step = (int64_t)gridDim.x * blockDim.x;
        if (vec) {
            float4* p4 = reinterpret_cast<float4*>(p);
            for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (HW >> 2); i += step) {
                float4 v = p4[i];
                v.x = fmaxf(v.x * a + b, 0.0f); v.y = fmaxf(v.y * a + b, 0.0f);
                v.z = fmaxf(v.z * a + b, 0.0f); v.w = fmaxf(v.w * a + b, 0.0f);
                p4[i] = v;
            }
        } else {
            for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < HW; i += step)
                p[i] = fmaxf(p[i] * a + b, 0.0f);
        }
    }
}

// One thread per pooled output (n, c, py, px): max over the 2x2 window of max(x*a + b, 0).
__global__ void __launch_bounds__(256) bn_relu_maxpool2_kernel(const float* __restrict__ x, float* __restrict__ out,
                                                               int64_t total, int C, int H, int W, int PH, int PW,
                                                               const float* __restrict__ scale,
                                                               const float* __restrict__ shift) {
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < total; o += (int64_t)gridDim.x * blockDim.x) {
        const int px = (int)(o % PW);
        int64_t r = o / PW;
        const int py = (int)(r % PH);
        const int64_t nc = r / PH;
        const int c = (int)(nc % C);
        const float a = __ldg(scale + c), b = __ldg(shift + c);
        const float* p = x + ((size_t)nc * H + 2 * py) * W + 2 * px;
        const float v0 = fmaxf(__ldg(p) * a + b, 0.0f), v1 = fmaxf(__ldg(p + 1) * a + b, 0.0f);
        const float v2 = fmaxf(__ldg(p + W) * a + b, 0.0f), v3 = fmaxf(__ldg(p + W + 1) * a + b, 0.0f);
        out[o] = fmaxf(fmaxf(v0, v1), fmaxf(v2, v3));
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

torch::Tensor bn_relu_(torch::Tensor x, torch::Tensor scale, torch::Tensor shift) {
    CHECK_F32(x); CHECK_F32(scale); CHECK_F32(shift);
    TORCH_CHECK(x.dim() >= 2, "x must be (N, C, ...)");
    const int64_t N = x.size(0), C = x.size(1);
    TORCH_CHECK(scale.numel() == C && shift.numel() == C, "scale/shift size mismatch");
    const int64_t planes = N * C;
    if (planes == 0 || x.numel() == 0) return x;
    const int64_t HW = x.numel() / planes;
    float* xp = x.data_ptr<float>();
    const int vec = (HW % 4 == 0) && ((reinterpret_cast<uintptr_t>(xp) & 15) == 0);
    const int threads = 256;
    const int64_t work = vec ? HW / 4 : HW;
    const int64_t bx = std::max<int64_t>(1, std::min<int64_t>((work + threads - 1) / threads, 65535));
    const dim3 grid((unsigned)bx, (unsigned)std::min<int64_t>(planes, 65535));
    auto stream = c10::cuda::getCurrentCUDAStream();
    bn_relu_kernel<<<grid, threads, 0, stream>>>(xp, planes, (int)C, HW, scale.data_ptr<float>(),
                                                 shift.data_ptr<float>(), vec);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return x;
}

torch::Tensor bn_relu_maxpool2(torch::Tensor x, torch::Tensor scale, torch::Tensor shift) {
    CHECK_F32(x); CHECK_F32(scale); CHECK_F32(shift);
    TORCH_CHECK(x.dim() == 4, "x must be NCHW");
    const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
    TORCH_CHECK(scale.numel() == C && shift.numel() == C, "scale/shift size mismatch");
    TORCH_CHECK(H >= 2 && W >= 2, "input smaller than the pooling window");
    const int64_t PH = H / 2, PW = W / 2;
    auto out = torch::empty({N, C, PH, PW}, x.options());
    const int64_t total = out.numel();
    if (total == 0) return out;
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, 1LL << 30);
    auto stream = c10::cuda::getCurrentCUDAStream();
    bn_relu_maxpool2_kernel<<<(unsigned)blocks, threads, 0, stream>>>(
        x.data_ptr<float>(), out.data_ptr<float>(), total, (int)C, (int)H, (int)W, (int)PH, (int)PW,
        scale.data_ptr<float>(), shift.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(name="kb_l3_003_vgg_bn_relu_pool_c3", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["bn_batch_scale_shift", "bn_relu_", "bn_relu_maxpool2"], extra_cuda_cflags=["-O3"],
                   verbose=False)


def _bn_scale_shift(bn, y):
    if bn.training or bn.running_mean is None:
        update = bn.training and bn.track_running_stats and bn.running_mean is not None
        factor = 0.0 if bn.momentum is None else bn.momentum
        if update:
            bn.num_batches_tracked.add_(1)
            if bn.momentum is None:
                factor = 1.0 / float(bn.num_batches_tracked.item())
        rm = bn.running_mean if update else bn.weight
        rv = bn.running_var if update else bn.weight
        return _ext.bn_batch_scale_shift(y, bn.weight.contiguous(), bn.bias.contiguous(), rm, rv, update,
                                         float(factor), float(bn.eps))
    scale = (bn.weight / torch.sqrt(bn.running_var + bn.eps)).contiguous()
    return scale, (bn.bias - bn.running_mean * scale).contiguous()


def _is_pool2(m):
    def two(v):
        return v in (2, (2, 2))
    return (isinstance(m, nn.MaxPool2d) and two(m.kernel_size) and two(m.stride) and m.padding in (0, (0, 0))
            and m.dilation in (1, (1, 1)) and not m.ceil_mode)


def _linear_relu(x, lin):
    if hasattr(torch, "_addmm_activation"):
        return torch._addmm_activation(lin.bias, x, lin.weight.t())
    return F.relu(F.linear(x, lin.weight, lin.bias))


class ModelNew(nn.Module):
    def __init__(self, in_channels, channels, num_classes, image_size):
        super().__init__()
        layers = []
        prev = in_channels
        for c in channels:
            for _ in range(2):
                layers += [nn.Conv2d(prev, c, kernel_size=3, padding=1), nn.BatchNorm2d(c), nn.ReLU(inplace=True)]
                prev = c
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
        self.features = nn.Sequential(*layers)
        spatial = image_size // (2 ** len(channels))
        self.classifier = nn.Sequential(
            nn.Linear(prev * spatial * spatial, 512),
            nn.ReLU(inplace=True),
            nn.Linear(512, num_classes),
        )

    def forward(self, x):
        h = x
        f = list(self.features)
        i = 0
        while i < len(f):
            m = f[i]
            if (isinstance(m, nn.Conv2d) and i + 2 < len(f) and isinstance(f[i + 1], nn.BatchNorm2d)
                    and isinstance(f[i + 2], nn.ReLU)):
                y = m(h).contiguous()                               # cuDNN conv (+ bias)
                scale, shift = _bn_scale_shift(f[i + 1], y)
                if i + 3 < len(f) and _is_pool2(f[i + 3]):
                    h = _ext.bn_relu_maxpool2(y, scale, shift)      # BN + ReLU + 2x2 max pool, one pass
                    i += 4
                else:
                    h = _ext.bn_relu_(y, scale, shift)              # BN + ReLU in place
                    i += 3
            else:
                h = m(h)
                i += 1
        h = torch.flatten(h, 1).contiguous()
        c = list(self.classifier)
        return F.linear(_linear_relu(h, c[0]), c[2].weight, c[2].bias)
