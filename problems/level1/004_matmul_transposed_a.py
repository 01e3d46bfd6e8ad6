"""Matrix multiplication with a transposed operand: C = A.T @ B, A (K x M), B (K x N)."""
import torch
import torch.nn as nn

# K = 2048: a correct fp32 kernel with a different accumulation order than cuBLAS differs by
# ~5e-5 absolute on outputs of magnitude ~45; the default 1e-4 atol is too tight near zero outputs.
ATOL = 1e-3
RTOL = 1e-3


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A.T, B)


M = 8192
K = 2048
N = 4096


def get_inputs():
    return [torch.randn(K, M), torch.randn(K, N)]


def get_init_inputs():
    return []
