"""Softmax over rows of length 4096 ((98304 x 4096) fp32: 1.5 GiB in, 1.5 GiB out)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


batch_size = 98304
dim = 4096

# Outputs are ~1e-4..1e-2; a tight absolute tolerance keeps an all-zeros output from passing, while the
# relative part covers exp/sum rounding of any correct fp32 implementation.
ATOL = 1e-6
RTOL = 1e-4


# Input sizes (docs/AUTHORING.md, Sizes): the batch varies, the rest of the shape stays; "large" is the
# file as written (what KernelBench's loader sees).
SIZES = {"small": {"batch_size": 1536}, "medium": {"batch_size": 12288}, "large": {}}


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
