# Triton (no inline CUDA): sigmoid as one streaming kernel -- each program loads a 4096-element tile (16 fp32
# per thread, vectorized 16-byte accesses), computes 1 / (1 + exp(-x)) in fp32 and stores to a fresh output.
# The op is memory-bound (2.5 GiB in, 2.5 GiB out) and eager PyTorch's sigmoid is already near the bandwidth
# roofline, so expect parity (~1.0x); Triton's exp is the ex2-based fast path, a few ulp, far inside 1e-4.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _sigmoid_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = 1.0 / (1.0 + tl.exp(-x))
    tl.store(y_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        if not (x.is_cuda and x.dtype == torch.float32):
            raise TypeError("triton_sigmoid_stream expects a float32 CUDA tensor")
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        if n == 0:
            return y
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
        _sigmoid_kernel[grid](x, y, n, BLOCK=4096, num_warps=8)
        return y
