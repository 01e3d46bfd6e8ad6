"""Mean over the last dimension of a (batch, 2048, 4096) tensor (batch 192: 6 GiB in)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.mean(x, dim=self.dim)


batch_size = 192
dim1 = 2048
dim2 = 4096
reduce_dim = -1

# results are ~N(0, 1/64); an all-zeros output fails the default tolerance.


# Input sizes (docs/AUTHORING.md, Sizes): the batch varies, the rest of the shape stays; "large" is the
# file as written (what KernelBench's loader sees).
SIZES = {"small": {"batch_size": 3}, "medium": {"batch_size": 24}, "large": {}}


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return [reduce_dim]
