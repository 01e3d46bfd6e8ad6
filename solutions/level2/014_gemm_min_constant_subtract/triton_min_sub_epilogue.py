# Triton (no inline CUDA) epilogue: the GEMM (+ bias) stays in cuBLAS via F.linear with the module's own
# weights; then ONE Triton kernel computes min(y, c) - c in place over the GEMM's fresh output, reading the
# learnable scalar c from its parameter tensor on the device (no .item() host sync). Eager PyTorch runs two
# elementwise kernels (minimum, sub), each reading and writing the 8192x4096 activation (128 MB); the fused
# kernel reads and writes it once, halving the epilogue traffic (the GEMM still dominates: expect ~1.03-1.05x).
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _min_sub_kernel(y_ptr, c_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    c = tl.load(c_ptr).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = tl.minimum(y, c) - c  # torch.min(x, constant); x - constant
    tl.store(y_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, constant):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.constant = nn.Parameter(torch.tensor(constant))

    def forward(self, x):
        y = F.linear(x.contiguous(), self.linear.weight, self.linear.bias)  # cuBLAS GEMM, fresh output
        if not (y.is_cuda and y.dtype == torch.float32 and y.is_contiguous()):
            raise TypeError("triton_min_sub_epilogue expects float32 CUDA tensors")
        c = self.constant
        if c.numel() != 1:
            raise ValueError("constant must be a scalar")
        n = y.numel()
        if n == 0:
            return y
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
        _min_sub_kernel[grid](y, c, n, BLOCK=4096, num_warps=8)
        return y
