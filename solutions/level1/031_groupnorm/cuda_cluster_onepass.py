# Single-pass GroupNorm with thread-block clusters (sm_90): a group (C/G channels x H x W, here 8 x 128 x 128
# = 512 KiB) is split over a cluster of up to 8 CTAs of 512 threads, each holding its slice in registers
# (float4 loads, up to 8 per thread). The CTAs reduce their partial sums through distributed shared memory
# (cluster.map_shared_rank, fixed order), compute the exact centred variance from the registers in a second
# cluster reduction, and write (x - mean) * rstd * gamma + beta as x * a + b (a = rstd * gamma, b = beta -
# mean * a, the same form as PyTorch's kernel) with float4 stores: one HBM read + one write of the 1 GiB
# tensor. Eager computes the moments in one kernel and normalizes in another (two reads + one write), so
# expect ~1.3-1.5x. Groups too large for a cluster's registers, H*W not a multiple of 4, unaligned data or a
# pre-sm_90 GPU take a plain one-block-per-group three-pass fallback (correct for any size, not fast).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cooperative_groups.h>
#include <cstdint>
#include <cmath>

namespace cg = cooperative_groups;

constexpr int THREADS = 512;
constexpr int NWARPS = THREADS / 32;
constexpr int MAX_CLUSTER = 8;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Block-wide sum, result returned to every thread. red: NWARPS floats of shared memory.
__device__ __forceinline__ float block_sum(float v, float* red) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) red[wid] = v;
    __syncthreads();
    float t = (lane < NWARPS) ? red[lane] : 0.f;
    t = warp_sum(t);
    __syncthreads();
    return t;
}

// One cluster per group (1-D grid, cluster dims (cs, 1, 1): the cluster's CTAs are consecutive blockIdx.x).
// Group q = blockIdx.x / cs covers float4 vectors [q * L4, (q + 1) * L4); CTA rank r holds [r * P4, r * P4 + P4).
// Requires H*W % 4 == 0 (a float4 never straddles two channels) and P4 <= THREADS * VPT.
template <int VPT, bool AFFINE>
__global__ void __launch_bounds__(THREADS, 2) cluster_norm_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                                                  const float* __restrict__ b, float* __restrict__ y,
                                                                  int64_t L4, int64_t P4, int HW, int Cg, int G,
                                                                  float eps) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __shared__ float red[NWARPS];
    __shared__ float part[2];
    cg::cluster_group cluster = cg::this_cluster();
    const unsigned cs = cluster.num_blocks();
    const unsigned rank = cluster.block_rank();
    const int64_t group = blockIdx.x / cs;
    const float4* xg = reinterpret_cast<const float4*>(x) + group * L4;
    float4* yg = reinterpret_cast<float4*>(y) + group * L4;
    const int64_t v0 = (int64_t)rank * P4;
    const int64_t v1 = min(v0 + P4, L4);
    const float inv_n = 1.0f / (float)(4 * L4);

    float4 v[VPT];
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int64_t idx = v0 + i * THREADS + threadIdx.x;
        if (idx < v1) {
            v[i] = __ldcs(xg + idx);
            s += (v[i].x + v[i].y) + (v[i].z + v[i].w);
        } else {
            v[i] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
    }
    s = block_sum(s, red);
    if (threadIdx.x == 0) part[0] = s;
    cluster.sync();
    float tot = 0.f;
    for (unsigned r = 0; r < cs; ++r) tot += *cluster.map_shared_rank(&part[0], r);
    const float mean = tot * inv_n;

    float q = 0.f;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int64_t idx = v0 + i * THREADS + threadIdx.x;
        if (idx < v1) {
            const float a0 = v[i].x - mean, a1 = v[i].y - mean, a2 = v[i].z - mean, a3 = v[i].w - mean;
            q += (a0 * a0 + a1 * a1) + (a2 * a2 + a3 * a3);
        }
    }
    q = block_sum(q, red);
    if (threadIdx.x == 0) part[1] = q;
    cluster.sync();
    float qt = 0.f;
    for (unsigned r = 0; r < cs; ++r) qt += *cluster.map_shared_rank(&part[1], r);
    cluster.sync();  // every CTA has read the others' partials: now any may finish and exit
    const float rstd = rsqrtf(qt * inv_n + eps);  // biased variance, as GroupNorm

    const int g = (int)(group % G);
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int64_t idx = v0 + i * THREADS + threadIdx.x;
        if (idx < v1) {
            float a = rstd, bb = -mean * rstd;
            if (AFFINE) {
                const int c = g * Cg + (4 * (int)idx) / HW;  // 4 * idx < L <= 4 * MAX_CLUSTER * THREADS * 8 here
                a = rstd * __ldg(w + c);
                bb = __ldg(b + c) - mean * a;
            }
            float4 o;
            o.x = v[i].x * a + bb;
            o.y = v[i].y * a + bb;
            o.z = v[i].z * a + bb;
            o.w = v[i].w * a + bb;
            __stcs(yg + idx, o);
        }
    }
#else
    __trap();  // never launched: the host only uses this path on sm_90+
#endif
}

// Fallback: one block per group, three passes over global memory (mean, centred variance, write). Any sizes.
template <bool AFFINE>
__global__ void __launch_bounds__(THREADS) plain_norm_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                                             const float* __restrict__ b, float* __restrict__ y,
                                                             int64_t L, int64_t HW, int Cg, int G, float eps) {
    __shared__ float red[NWARPS];
    const int64_t group = blockIdx.x;
    const float* xg = x + group * L;
    float* yg = y + group * L;
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < L; i += THREADS) s += xg[i];
    const float mean = block_sum(s, red) / (float)L;
    float q = 0.f;
    for (int64_t i = threadIdx.x; i < L; i += THREADS) { const float d = xg[i] - mean; q += d * d; }
    const float rstd = rsqrtf(block_sum(q, red) / (float)L + eps);
    const int g = (int)(group % G);
    for (int64_t i = threadIdx.x; i < L; i += THREADS) {
        float a = rstd, bb = -mean * rstd;
        if (AFFINE) {
            const int c = g * Cg + (int)(i / HW);
            a = rstd * w[c];
            bb = b[c] - mean * a;
        }
        yg[i] = xg[i] * a + bb;
    }
}

template <int VPT, bool AFFINE>
static void launch_cluster(int cs, int64_t groups, cudaStream_t stream, const float* x, const float* w, const float* b,
                           float* y, int64_t L4, int64_t P4, int HW, int Cg, int G, float eps) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(groups * cs), 1, 1);
    cfg.blockDim = dim3(THREADS, 1, 1);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = (unsigned)cs;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, cluster_norm_kernel<VPT, AFFINE>, x, w, b, y, L4, P4, HW, Cg, G, eps));
}

// x: (N, C, *) contiguous; normalizes each of the N * G groups of C/G consecutive channels.
torch::Tensor group_norm_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, int64_t G, double eps) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    TORCH_CHECK(x.dim() >= 2, "x must be (N, C, ...)");
    const int64_t N = x.size(0), C = x.size(1);
    TORCH_CHECK(G > 0 && C % G == 0, "channels must be divisible by groups");
    const bool affine = w.defined() && w.numel() > 0;
    if (affine) {
        TORCH_CHECK(w.is_cuda() && b.is_cuda() && w.is_contiguous() && b.is_contiguous(), "bad affine parameters");
        TORCH_CHECK(w.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32, "affine must be float32");
        TORCH_CHECK(w.numel() == C && b.numel() == C, "affine parameters must have C elements");
    }
    auto y = torch::empty_like(x);
    if (x.numel() == 0) return y;
    const int64_t HW = x.numel() / (N * C);
    const int64_t Cg = C / G;
    const int64_t L = Cg * HW;
    const int64_t groups = N * G;
    TORCH_CHECK(HW <= 2147483647LL && C <= 2147483647LL, "sizes too large");
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const float* wp = affine ? w.data_ptr<float>() : nullptr;
    const float* bp = affine ? b.data_ptr<float>() : nullptr;
    auto stream = c10::cuda::getCurrentCUDAStream();

    int dev = x.get_device(), major = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    const bool vec = (HW % 4 == 0) && (((reinterpret_cast<uintptr_t>(xp) | reinterpret_cast<uintptr_t>(yp)) & 15) == 0);
    int cs = 0, vpt = 0;
    int64_t P4 = 0;
    const int64_t L4 = L / 4;
    if (major >= 9 && vec) {
        // smallest cluster whose registers hold the group with <= 4 float4 per thread, else <= 8
        for (int maxv = 4; maxv <= 8 && cs == 0; maxv *= 2) {
            for (int c = 1; c <= MAX_CLUSTER; c *= 2) {
                const int64_t p4 = (L4 + c - 1) / c;
                if (p4 <= (int64_t)THREADS * maxv) {
                    cs = c;
                    P4 = p4;
                    vpt = p4 <= THREADS ? 1 : p4 <= 2 * THREADS ? 2 : p4 <= 4 * THREADS ? 4 : 8;
                    break;
                }
            }
        }
    }
    if (cs > 0 && groups * cs <= 2147483647LL) {
        const float e = (float)eps;
#define KB_CL(V) do { if (affine) launch_cluster<V, true>(cs, groups, stream, xp, wp, bp, yp, L4, P4, (int)HW, (int)Cg, (int)G, e); \
                      else launch_cluster<V, false>(cs, groups, stream, xp, wp, bp, yp, L4, P4, (int)HW, (int)Cg, (int)G, e); } while (0)
        if (vpt == 1) KB_CL(1); else if (vpt == 2) KB_CL(2); else if (vpt == 4) KB_CL(4); else KB_CL(8);
#undef KB_CL
    } else {
        TORCH_CHECK(groups <= 2147483647LL, "too many groups");
        if (affine) plain_norm_kernel<true><<<(unsigned)groups, THREADS, 0, stream>>>(xp, wp, bp, yp, L, HW, (int)Cg, (int)G, (float)eps);
        else plain_norm_kernel<false><<<(unsigned)groups, THREADS, 0, stream>>>(xp, wp, bp, yp, L, HW, (int)Cg, (int)G, (float)eps);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_src = "torch::Tensor group_norm_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, int64_t G, double eps);"

_ext = load_inline(
    name="kb_l1_031_groupnorm_cluster",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["group_norm_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, num_groups, num_channels):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups, num_channels)
        with torch.no_grad():
            self.gn.weight.uniform_(0.5, 1.5)
            self.gn.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        gn = self.gn
        if gn.affine:
            w, b = gn.weight.contiguous(), gn.bias.contiguous()
        else:
            w = b = torch.empty(0, device=x.device, dtype=x.dtype)
        return _ext.group_norm_forward(x.contiguous(), w, b, gn.num_groups, float(gn.eps))
