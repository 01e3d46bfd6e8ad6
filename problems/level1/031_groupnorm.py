"""GroupNorm (32 groups) over an NCHW activation."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, num_groups, num_channels):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups, num_channels)
        # non-trivial affine parameters so that a candidate ignoring them fails
        with torch.no_grad():
            self.gn.weight.uniform_(0.5, 1.5)
            self.gn.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.gn(x)


batch_size = 64
num_channels = 256
num_groups = 32
height, width = 128, 128


def get_inputs():
    return [torch.randn(batch_size, num_channels, height, width)]


def get_init_inputs():
    return [num_groups, num_channels]
