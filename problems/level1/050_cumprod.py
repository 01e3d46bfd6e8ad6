"""Inclusive cumulative product along rows of length 4096 with entries near 1."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumprod(x, dim=self.dim)


batch_size = 65536
length = 4096
scan_dim = 1

# Up to 4096 chained fp32 multiplications: relative rounding error grows with the row position and depends
# on the association order, so allow 1e-3 relative.
ATOL = 1e-4
RTOL = 1e-3


def get_inputs():
    # entries 1 + 0.01*N(0,1): running products stay within roughly e^-3..e^3 (no underflow to 0)
    return [1.0 + 0.01 * torch.randn(batch_size, length)]


def get_init_inputs():
    return [scan_dim]
