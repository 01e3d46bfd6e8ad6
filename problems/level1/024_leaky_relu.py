"""LeakyReLU (negative slope 0.01): y = x if x > 0 else slope * x, elementwise on a (4096 x 163840) fp32 tensor (2.5 GiB in, 2.5 GiB out)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return F.leaky_relu(x, negative_slope=self.negative_slope)


batch_size = 4096
dim = 163840
negative_slope = 0.01


# Input sizes (docs/AUTHORING.md, Sizes): the batch varies, the rest of the shape stays; "large" is the
# file as written (what KernelBench's loader sees).
SIZES = {"small": {"batch_size": 64}, "medium": {"batch_size": 512}, "large": {}}


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [negative_slope]
