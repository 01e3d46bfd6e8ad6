"""Min (values only) over the last dimension of a (batch, 2048, 4096) tensor."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.min(x, dim=self.dim)[0]


batch_size = 128
dim1 = 2048
dim2 = 4096
reduce_dim = -1


# Input sizes (docs/AUTHORING.md, Sizes): the batch varies, the rest of the shape stays; "large" is the
# file as written (what KernelBench's loader sees).
SIZES = {"small": {"batch_size": 2}, "medium": {"batch_size": 16}, "large": {}}


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return [reduce_dim]
