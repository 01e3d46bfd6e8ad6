"""Triton LeakyReLU: an unmasked, evict-first streaming body over whole 4096-element tiles plus one masked tail launch.

Expected win: parity to a few % over eager (F.leaky_relu is one vectorized elementwise kernel near the HBM roofline);
the body launch has no masks, so every access is a full 16-byte vector, and evict-first keeps the 2.5 GiB stream
from thrashing L2 -- at best it closes the last few % to the bandwidth roofline.
"""
# y = x > 0 ? x : x * negative_slope in fp32, PyTorch's formula (the slope is a runtime fp32 argument).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _leaky_body(x_ptr, y_ptr, slope, BLOCK: tl.constexpr):
    # full tiles only: no mask
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, eviction_policy="evict_first")
    y = tl.where(x > 0.0, x, x * slope)
    tl.store(y_ptr + offs, y, eviction_policy="evict_first")


@triton.jit
def _leaky_tail(x_ptr, y_ptr, slope, start, n_elements, BLOCK: tl.constexpr):
    offs = start + tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.where(x > 0.0, x, x * slope)
    tl.store(y_ptr + offs, y, mask=mask)


BLOCK = 4096


class ModelNew(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        if x.dtype != torch.float32:
            raise TypeError("triton_leaky_body_tail expects a float32 tensor")
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        slope = float(self.negative_slope)
        full = n // BLOCK
        if full > 0:
            _leaky_body[(full,)](x, y, slope, BLOCK=BLOCK, num_warps=8)
        start = full * BLOCK
        if start < n:
            _leaky_tail[(triton.cdiv(n - start, 1024),)](x, y, slope, start, n, BLOCK=1024, num_warps=4)
        return y
