# Triton (no inline CUDA): the MLP's four GEMMs stay in cuBLAS via F.linear with the module's own weights (the
# bias add rides in cuBLAS's epilogue), and each hidden ReLU is one Triton kernel applied in place over that
# GEMM's fresh output instead of nn.ReLU allocating a new 32 MB activation. The GEMMs (~220 GFLOP in fp32)
# dominate, so expect ~1.0x (a few us saved per layer from skipping the allocations); the candidate exists to
# put a Triton kernel on level3, honestly, not to claim a GEMM speedup.
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _relu_inplace_kernel(y_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    v = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, tl.maximum(v, 0.0), mask=mask)


def _relu_(y):
    n = y.numel()
    if n:
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
        _relu_inplace_kernel[grid](y, n, BLOCK=4096, num_warps=8)
    return y


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_sizes, output_size):
        super().__init__()
        layers = []
        prev = input_size
        for h in hidden_sizes:
            layers.append(nn.Linear(prev, h))
            layers.append(nn.ReLU())
            prev = h
        layers.append(nn.Linear(prev, output_size))
        self.network = nn.Sequential(*layers)  # same keys as the reference: network.0.weight, network.2.weight, ...

    def forward(self, x):
        if not (x.is_cuda and x.dtype == torch.float32):
            raise TypeError("triton_relu_inplace expects a float32 CUDA tensor")
        h = x.contiguous()
        fresh = False  # whether h is a tensor this forward allocated (never write into the input)
        for layer in self.network:
            if isinstance(layer, nn.Linear):
                h = F.linear(h, layer.weight, layer.bias)  # cuBLAS GEMM (+ bias epilogue), fresh output
                fresh = True
            elif isinstance(layer, nn.ReLU) and fresh and h.is_contiguous():
                h = _relu_(h)  # in place over the fresh GEMM output
            else:
                h = layer(h)
                fresh = True
        return h
