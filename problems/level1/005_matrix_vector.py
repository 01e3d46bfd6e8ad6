"""Matrix-vector product y = A @ x with A (32768 x 32768) and x (32768 x 1): memory bound (4 GiB of A)."""
import torch
import torch.nn as nn

# Each output is a sum of 32768 products (magnitude ~180); a correct fp32 reduction in another
# order (e.g. per-thread partial sums + tree) differs from cuBLAS gemv by up to ~1e-3 absolute.
ATOL = 1e-2
RTOL = 1e-3


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, x):
        return torch.matmul(A, x)


M = 32768
K = 32768


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, 1)]


def get_init_inputs():
    return []
