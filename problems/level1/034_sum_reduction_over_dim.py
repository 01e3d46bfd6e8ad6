"""Sum over the middle dimension (keepdim=True) of a (384, 4096, 1024) fp32 tensor (6 GiB in)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.sum(x, dim=self.dim, keepdim=True)


batch_size = 384
dim1 = 4096
dim2 = 1024
reduce_dim = 1

# Sums of 4096 values of magnitude ~1 (results ~64): a correct fp32 kernel with another summation order can
# differ by a few 1e-4 in absolute terms on results near zero.
ATOL = 1e-3
RTOL = 1e-4


# Input sizes (docs/AUTHORING.md, Sizes): the batch varies, the rest of the shape stays; "large" is the
# file as written (what KernelBench's loader sees).
SIZES = {"small": {"batch_size": 6}, "medium": {"batch_size": 48}, "large": {}}


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return [reduce_dim]
