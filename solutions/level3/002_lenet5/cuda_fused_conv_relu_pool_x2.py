"""LeNet-5: both conv5x5 -> ReLU -> maxpool2 stages in ONE CUDA kernel (images staged in shared memory); FCs in cuBLAS.

Expected win: for 1- and 6-channel inputs cuDNN's convolutions are far from peak, and eager writes and re-reads the
32768x6x28x28 conv1 map (588 MiB: ReLU pass, pool pass) and the conv2 map; the fused kernel reads each 4 KiB image
once, keeps the pooled 6x14x14 map in shared memory and writes only the 400 features, so the feature extractor
becomes a short compute-bound kernel; fc1/fc2 use cuBLASLt's fused bias+ReLU epilogue where torch offers it.
"""
# Arithmetic: each conv output is sum over (ic, ky, kx) of in * w in fp32 (this loop order), then the 2x2 window
# maximum, + bias, ReLU. max(conv) + b == max(conv + b) exactly (rounding of a + b is monotone in a) and ReLU
# commutes with max, so this equals the reference's max_pool2d(relu(conv + b)). Pooling is 2x2 / stride 2, floor
# mode; sizes (batch, H, W, channel counts) come from the tensors.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = ("torch::Tensor lenet_features(torch::Tensor x, torch::Tensor w1, torch::Tensor b1, torch::Tensor w2, "
           "torch::Tensor b2);")

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>

// One pooled output of conv(K x K, stride 1) -> 2x2 max pool -> + bias -> ReLU.
// in: [Cin][IH][IW] in shared memory; w: [Cin][K][K] of this output channel.
template <int K>
__device__ __forceinline__ float conv_pool_relu(const float* __restrict__ in, const float* __restrict__ w, int Cin,
                                                int IH, int IW, int py, int px, float bias) {
    float a00 = 0.f, a01 = 0.f, a10 = 0.f, a11 = 0.f;
    for (int ic = 0; ic < Cin; ++ic) {
        const float* ip = in + ((size_t)ic * IH + 2 * py) * IW + 2 * px;
        const float* wp = w + ic * K * K;
        #pragma unroll
        for (int r = 0; r < K + 1; ++r) {              // input rows 2py + r, r = 0..K
            float row[K + 1];
            #pragma unroll
            for (int j = 0; j < K + 1; ++j) row[j] = ip[r * IW + j];
            if (r < K) {                              // output row 2py (ky = r)
                #pragma unroll
                for (int kx = 0; kx < K; ++kx) {
                    const float wv = wp[r * K + kx];
                    a00 = fmaf(row[kx], wv, a00);
                    a01 = fmaf(row[kx + 1], wv, a01);
                }
            }
            if (r > 0) {                              // output row 2py + 1 (ky = r - 1)
                #pragma unroll
                for (int kx = 0; kx < K; ++kx) {
                    const float wv = wp[(r - 1) * K + kx];
                    a10 = fmaf(row[kx], wv, a10);
                    a11 = fmaf(row[kx + 1], wv, a11);
                }
            }
        }
    }
    const float m = fmaxf(fmaxf(a00, a01), fmaxf(a10, a11));
    return fmaxf(m + bias, 0.0f);
}

// Each block walks groups of `imgs` images: stage the images in shared memory, stage 1 (conv1/pool1 into
// shared memory), stage 2 (conv2/pool2 into the (N, C2*P2h*P2w) output).
template <int K>
__global__ void __launch_bounds__(256) lenet_features_kernel(
        const float* __restrict__ x, const float* __restrict__ w1, const float* __restrict__ b1,
        const float* __restrict__ w2, const float* __restrict__ b2, float* __restrict__ out,
        int N, int Cin, int H, int W, int C1, int P1h, int P1w, int C2, int P2h, int P2w, int imgs) {
    extern __shared__ float sm[];
    const int nw1 = C1 * Cin * K * K, nw2 = C2 * C1 * K * K;
    float* sw1 = sm;
    float* sb1 = sw1 + nw1;
    float* sw2 = sb1 + C1;
    float* sb2 = sw2 + nw2;
    float* sin = sb2 + C2;                                  // imgs * Cin*H*W
    const int in_sz = Cin * H * W;
    float* sp1 = sin + (size_t)imgs * in_sz;                // imgs * C1*P1h*P1w
    const int p1_sz = C1 * P1h * P1w;
    const int out_sz = C2 * P2h * P2w;
    for (int i = threadIdx.x; i < nw1; i += blockDim.x) sw1[i] = w1[i];
    for (int i = threadIdx.x; i < C1; i += blockDim.x) sb1[i] = b1[i];
    for (int i = threadIdx.x; i < nw2; i += blockDim.x) sw2[i] = w2[i];
    for (int i = threadIdx.x; i < C2; i += blockDim.x) sb2[i] = b2[i];
    for (long long g = (long long)blockIdx.x * imgs; g < N; g += (long long)gridDim.x * imgs) {
        const int nimg = (int)std::min<long long>(imgs, N - g);
        __syncthreads();                                    // weights staged / previous group done
        const float* xg = x + (size_t)g * in_sz;
        const int tot_in = nimg * in_sz;
        for (int i = threadIdx.x; i < tot_in; i += blockDim.x) sin[i] = __ldg(xg + i);
        __syncthreads();
        const int p1_hw = P1h * P1w;
        const int n1 = nimg * p1_sz;
        for (int it = threadIdx.x; it < n1; it += blockDim.x) {
            const int im = it / p1_sz;
            const int r = it - im * p1_sz;
            const int oc = r / p1_hw, q = r - oc * p1_hw;
            const int py = q / P1w, px = q - py * P1w;
            sp1[it] = conv_pool_relu<K>(sin + (size_t)im * in_sz, sw1 + oc * Cin * K * K, Cin, H, W, py, px, sb1[oc]);
        }
        __syncthreads();
        const int p2_hw = P2h * P2w;
        const int n2 = nimg * out_sz;
        float* og = out + (size_t)g * out_sz;
        for (int it = threadIdx.x; it < n2; it += blockDim.x) {
            const int im = it / out_sz;
            const int r = it - im * out_sz;
            const int oc = r / p2_hw, q = r - oc * p2_hw;
            const int py = q / P2w, px = q - py * P2w;
            og[it] = conv_pool_relu<K>(sp1 + (size_t)im * p1_sz, sw2 + oc * C1 * K * K, C1, P1h, P1w, py, px, sb2[oc]);
        }
    }
}

torch::Tensor lenet_features(torch::Tensor x, torch::Tensor w1, torch::Tensor b1, torch::Tensor w2, torch::Tensor b2) {
    for (auto* t : {&x, &w1, &b1, &w2, &b2}) {
        TORCH_CHECK(t->is_cuda() && t->is_contiguous() && t->scalar_type() == torch::kFloat32,
                    "inputs must be contiguous float32 CUDA tensors");
    }
    TORCH_CHECK(x.dim() == 4 && w1.dim() == 4 && w2.dim() == 4, "x, w1, w2 must be 4-D");
    const int64_t N = x.size(0), Cin = x.size(1), H = x.size(2), W = x.size(3);
    const int64_t C1 = w1.size(0), K = w1.size(2), C2 = w2.size(0);
    TORCH_CHECK(w1.size(1) == Cin && w1.size(3) == K && w2.size(1) == C1 && w2.size(2) == K && w2.size(3) == K,
                "weight shapes do not chain");
    TORCH_CHECK(K == 5, "this kernel is compiled for 5x5 convolutions");
    TORCH_CHECK(b1.numel() == C1 && b2.numel() == C2, "bias sizes");
    TORCH_CHECK(H >= K && W >= K, "input smaller than the kernel");
    const int64_t P1h = (H - K + 1) / 2, P1w = (W - K + 1) / 2;
    TORCH_CHECK(P1h >= K && P1w >= K, "pooled map smaller than the second kernel");
    const int64_t P2h = (P1h - K + 1) / 2, P2w = (P1w - K + 1) / 2;
    auto out = torch::empty({N, C2 * P2h * P2w}, x.options());
    if (N == 0 || out.numel() == 0) return out;
    const size_t wbytes = (size_t)(C1 * Cin * K * K + C1 + C2 * C1 * K * K + C2) * sizeof(float);
    const size_t per_img = (size_t)(Cin * H * W + C1 * P1h * P1w) * sizeof(float);
    int dev = 0;
    C10_CUDA_CHECK(cudaGetDevice(&dev));
    int max_optin = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    // as many images per group as fit in 48 KiB (at most 8); more shared memory only when one image needs it
    int64_t imgs = (int64_t)((48 * 1024 > wbytes ? 48 * 1024 - wbytes : 0) / per_img);
    imgs = std::max<int64_t>(1, std::min<int64_t>(imgs, 8));
    const size_t smem = wbytes + (size_t)imgs * per_img;
    TORCH_CHECK(smem <= (size_t)max_optin, "image too large for the fused kernel's shared memory");
    if (smem > 48 * 1024)
        C10_CUDA_CHECK(cudaFuncSetAttribute(lenet_features_kernel<5>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)smem));
    const int64_t groups = (N + imgs - 1) / imgs;
    const unsigned grid = (unsigned)std::min<int64_t>(groups, 1LL << 30);
    auto stream = c10::cuda::getCurrentCUDAStream();
    lenet_features_kernel<5><<<grid, 256, smem, stream>>>(
        x.data_ptr<float>(), w1.data_ptr<float>(), b1.data_ptr<float>(), w2.data_ptr<float>(), b2.data_ptr<float>(),
        out.data_ptr<float>(), (int)N, (int)Cin, (int)H, (int)W, (int)C1, (int)P1h, (int)P1w, (int)C2, (int)P2h,
        (int)P2w, (int)imgs);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(name="kb_l3_002_lenet_features_c3", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["lenet_features"], extra_cuda_cflags=["-O3"], verbose=False)


def _linear_relu(x, lin):
    # bias + ReLU in cuBLASLt's epilogue (torch falls back to addmm + relu where Lt does not apply)
    if hasattr(torch, "_addmm_activation"):
        return torch._addmm_activation(lin.bias, x, lin.weight.t())
    return F.relu(F.linear(x, lin.weight, lin.bias))


class ModelNew(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, kernel_size=5, stride=1)
        self.conv2 = nn.Conv2d(6, 16, kernel_size=5, stride=1)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x):
        f = _ext.lenet_features(x.contiguous(), self.conv1.weight.contiguous(), self.conv1.bias.contiguous(),
                                self.conv2.weight.contiguous(), self.conv2.bias.contiguous())   # (N, 400)
        f = _linear_relu(f, self.fc1)
        f = _linear_relu(f, self.fc2)
        return F.linear(f, self.fc3.weight, self.fc3.bias)
