"""Clamp with per-feature bounds: torch.clamp(x, min=lo, max=hi), lo/hi of shape (dim,) broadcast over rows."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        # lo in [-1.5, -0.5], hi in [0.5, 1.5]; always lo < hi
        self.lo = nn.Parameter(-0.5 - torch.rand(dim))
        self.hi = nn.Parameter(0.5 + torch.rand(dim))

    def forward(self, x):
        return torch.clamp(x, min=self.lo, max=self.hi)


batch_size = 4096
dim = 98304


# Input sizes (docs/AUTHORING.md, Sizes): the batch varies, the rest of the shape stays; "large" is the
# file as written (what KernelBench's loader sees).
SIZES = {"small": {"batch_size": 64}, "medium": {"batch_size": 512}, "large": {}}


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
