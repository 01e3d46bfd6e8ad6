"""Max (values only) over the middle dimension of a (batch, 4096, 1024) tensor."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.max(x, dim=self.dim)[0]


batch_size = 256
dim1 = 4096
dim2 = 1024
reduce_dim = 1


# Input sizes (docs/AUTHORING.md, Sizes): the batch varies, the rest of the shape stays; "large" is the
# file as written (what KernelBench's loader sees).
SIZES = {"small": {"batch_size": 4}, "medium": {"batch_size": 32}, "large": {}}


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return [reduce_dim]
