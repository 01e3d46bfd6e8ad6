# Triton (no inline CUDA) epilogue: the GEMM (+ bias) stays in cuBLAS via F.linear with the module's own
# weights; then ONE Triton kernel, a program per row, streams the row in 2048-wide tiles, applies the sigmoid in
# registers and accumulates the row sum (fp32 lanes, one tree reduction at the end), writing a single value per
# row. Eager PyTorch writes the sigmoid output (16384x8192, 512 MB) and reads it back for the sum; here the
# GEMM output is read once and the (16384, 1) result is all that is written -- a third of the epilogue traffic,
# and the 512 MB intermediate is never allocated.
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _sigmoid_rowsum_kernel(y_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = y_ptr + row * stride_row
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        idx = start + cols
        mask = idx < n_cols
        v = tl.load(base + idx, mask=mask, other=0.0).to(tl.float32)
        s = 1.0 / (1.0 + tl.exp(-v))  # torch.sigmoid
        acc += tl.where(mask, s, 0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = F.linear(x.contiguous(), self.linear.weight, self.linear.bias)  # cuBLAS GEMM, fresh output
        if not (y.is_cuda and y.dtype == torch.float32 and y.dim() == 2 and y.stride(1) == 1):
            raise TypeError("triton_sigmoid_rowsum expects a row-major float32 CUDA matrix")
        rows, cols = y.shape
        out = torch.empty((rows, 1), device=y.device, dtype=y.dtype)
        if rows == 0:
            return out
        if cols == 0:
            return out.zero_()
        block = min(2048, triton.next_power_of_2(cols))
        grid = lambda meta: (rows,)
        _sigmoid_rowsum_kernel[grid](y, out, cols, y.stride(0), BLOCK=block, num_warps=8 if block >= 2048 else 4)
        return out
