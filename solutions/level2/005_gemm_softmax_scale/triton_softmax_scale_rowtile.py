# Triton (no inline CUDA) epilogue: the GEMM (+ bias) stays in cuBLAS via F.linear with the module's own
# weights; then ONE Triton kernel, a program per row, loads the whole 1024-wide row into registers, computes the
# max, exp(y - max), the sum and writes exp / sum * scale in place over the GEMM's fresh output. Eager PyTorch
# runs softmax (read + write of the 32768x1024 activation, 128 MB each) and then the scalar multiply (another
# read + write); the fused kernel reads and writes it once. Rows wider than 16384 use an online-softmax sweep
# (running max and rescaled sum) followed by a normalizing sweep.
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl

_MAX_TILE = 16384


@triton.jit
def _softmax_scale_tile_kernel(y_ptr, n_cols, stride_row, scale, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = y_ptr + row * stride_row
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    v = tl.load(base + cols, mask=mask, other=-float("inf")).to(tl.float32)
    m = tl.max(v, axis=0)
    e = tl.exp(v - m)
    e = tl.where(mask, e, 0.0)
    s = tl.sum(e, axis=0)
    tl.store(base + cols, e / s * scale, mask=mask)  # torch.softmax, then x * scaling_factor


@triton.jit
def _softmax_scale_loop_kernel(y_ptr, n_cols, stride_row, scale, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = y_ptr + row * stride_row
    cols = tl.arange(0, BLOCK)
    m_i = tl.full([BLOCK], -float("inf"), dtype=tl.float32)
    s_i = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        idx = start + cols
        v = tl.load(base + idx, mask=idx < n_cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m_i, v)
        # lanes that have seen nothing yet keep m = -inf: guard the rescale so -inf - -inf never appears
        alpha = tl.where(m_new == -float("inf"), 0.0, tl.exp(m_i - m_new))
        p = tl.where(m_new == -float("inf"), 0.0, tl.exp(v - m_new))
        s_i = s_i * alpha + p
        m_i = m_new
    m = tl.max(m_i, axis=0)
    s = tl.sum(tl.where(m_i == -float("inf"), 0.0, s_i * tl.exp(m_i - m)), axis=0)
    for start in range(0, n_cols, BLOCK):
        idx = start + cols
        mask = idx < n_cols
        v = tl.load(base + idx, mask=mask, other=0.0).to(tl.float32)
        tl.store(base + idx, tl.exp(v - m) / s * scale, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        y = F.linear(x.contiguous(), self.linear.weight, self.linear.bias)  # cuBLAS GEMM, fresh output
        if not (y.is_cuda and y.dtype == torch.float32 and y.dim() == 2 and y.stride(1) == 1):
            raise TypeError("triton_softmax_scale_rowtile expects a row-major float32 CUDA matrix")
        rows, cols = y.shape
        if rows == 0 or cols == 0:
            return y
        grid = lambda meta: (rows,)
        scale = float(self.scaling_factor)
        if cols <= _MAX_TILE:
            block = triton.next_power_of_2(cols)
            warps = 16 if block >= 8192 else (8 if block >= 2048 else 4)
            _softmax_scale_tile_kernel[grid](y, cols, y.stride(0), scale, BLOCK=block, num_warps=warps)
        else:
            _softmax_scale_loop_kernel[grid](y, cols, y.stride(0), scale, BLOCK=4096, num_warps=8)
        return y
