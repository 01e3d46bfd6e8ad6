"""Mean squared error written out: mean((predictions - targets) ** 2) -> scalar."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return torch.mean((predictions - targets) ** 2)


batch_size = 8192
dim = 32768

# Scalar mean over 268M terms: a correct fp32 reduction with another summation order (block partials,
# atomics) differs from the reference by ~1e-6..1e-5 relative; allow 1e-3 relative.
ATOL = 1e-4
RTOL = 1e-3


def get_inputs():
    # a random global scale per call makes the loss vary between calls (a constant cannot pass)
    scale = 0.5 + 1.5 * torch.rand(())
    return [scale * torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
