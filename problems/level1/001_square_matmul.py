"""Square matrix multiplication C = A @ B (4096 x 4096 x 4096, fp32)."""
import torch
import torch.nn as nn

# K = 4096: a correct fp32 kernel that accumulates in a different order (e.g. one sequential
# accumulator per output) differs from cuBLAS by ~1e-4 absolute on outputs of magnitude ~64.
ATOL = 1e-3
RTOL = 1e-3


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


N = 4096


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
