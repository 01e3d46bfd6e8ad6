"""Absolute difference |x - y|, elementwise on two (4096 x 65536) tensors."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return torch.abs(x - y)


batch_size = 4096
dim = 65536


# Input sizes (docs/AUTHORING.md, Sizes): the batch varies, the rest of the shape stays; "large" is the
# file as written (what KernelBench's loader sees).
SIZES = {"small": {"batch_size": 64}, "medium": {"batch_size": 512}, "large": {}}


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
