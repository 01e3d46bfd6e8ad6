# Triton (no inline CUDA) epilogue: the GEMM (+ bias) stays in cuBLAS via F.linear with the module's own
# weights; then ONE Triton kernel, a program per row, loads the whole 8192-wide row into registers (one read),
# reduces its mean, and writes gelu(y - mean) (exact erf GELU) in place over the GEMM's fresh output. Eager
# PyTorch runs mean (read 256 MB), subtract (read + write) and GELU (read + write) over the 8192x8192 activation;
# the fused kernel reads and writes it once -- 2 passes instead of 5. Rows wider than 16384 fall back to a
# two-sweep kernel (the second sweep mostly hits L2).
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl

_MAX_TILE = 16384


@triton.jit
def _gelu(x):  # F.gelu (approximate='none'): x * 0.5 * (1 + erf(x / sqrt(2)))
    return x * 0.5 * (1.0 + tl.erf(x * 0.7071067811865476))


@triton.jit
def _rowmean_gelu_tile_kernel(y_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = y_ptr + row * stride_row
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    v = tl.load(base + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(v, axis=0) / n_cols
    tl.store(base + cols, _gelu(v - mean), mask=mask)


@triton.jit
def _rowmean_gelu_loop_kernel(y_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = y_ptr + row * stride_row
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        idx = start + cols
        acc += tl.load(base + idx, mask=idx < n_cols, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / n_cols
    for start in range(0, n_cols, BLOCK):
        idx = start + cols
        mask = idx < n_cols
        v = tl.load(base + idx, mask=mask, other=0.0).to(tl.float32)
        tl.store(base + idx, _gelu(v - mean), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = F.linear(x.contiguous(), self.linear.weight, self.linear.bias)  # cuBLAS GEMM, fresh output
        if not (y.is_cuda and y.dtype == torch.float32 and y.dim() == 2 and y.stride(1) == 1):
            raise TypeError("triton_rowmean_gelu expects a row-major float32 CUDA matrix")
        rows, cols = y.shape
        if rows == 0 or cols == 0:
            return y
        grid = lambda meta: (rows,)
        if cols <= _MAX_TILE:
            block = triton.next_power_of_2(cols)
            warps = 16 if block >= 8192 else (8 if block >= 2048 else 4)
            _rowmean_gelu_tile_kernel[grid](y, cols, y.stride(0), BLOCK=block, num_warps=warps)
        else:
            _rowmean_gelu_loop_kernel[grid](y, cols, y.stride(0), BLOCK=4096, num_warps=8)
        return y
