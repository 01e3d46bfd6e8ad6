# Triton (no inline CUDA): hardtanh as one streaming clamp kernel -- each program loads a 4096-element tile
# (16 fp32 per thread, vectorized 16-byte accesses), clamps to [min_val, max_val] and stores to a fresh output.
# The op is purely memory-bound (2.5 GiB in, 2.5 GiB out) and eager PyTorch's clamp kernel is already close to
# the bandwidth roofline, so expect parity (~1.0x): what this candidate buys is a Triton entry with wide tiles
# and 64-bit offsets, not a fusion win.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _hardtanh_kernel(x_ptr, y_ptr, n_elements, lo, hi, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = tl.minimum(tl.maximum(x, lo), hi)  # F.hardtanh: clamp(x, min_val, max_val)
    tl.store(y_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, min_val, max_val):
        super().__init__()
        self.min_val = min_val
        self.max_val = max_val

    def forward(self, x):
        if not (x.is_cuda and x.dtype == torch.float32):
            raise TypeError("triton_clamp_stream expects a float32 CUDA tensor")
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        if n == 0:
            return y
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
        _hardtanh_kernel[grid](x, y, n, float(self.min_val), float(self.max_val), BLOCK=4096, num_warps=8)
        return y
