"""Reverse (suffix) cumulative sum along rows of length 4096: out[i] = sum_{j >= i} x[j]."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumsum(x.flip(self.dim), dim=self.dim).flip(self.dim)


batch_size = 65536
length = 4096
scan_dim = 1

# Running sums over up to 4096 terms (values up to ~±200): a correct fp32 scan with a different
# association order differs by a few 1e-4 in absolute terms.
ATOL = 1e-3
RTOL = 1e-3


def get_inputs():
    return [torch.randn(batch_size, length)]


def get_init_inputs():
    return [scan_dim]
