"""Grouped 2D convolution (nn.Conv2d, 256 -> 256 channels, 8 groups, 3x3, padding 1) on 128x128 maps."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, padding, groups):
        super().__init__()
        self.conv2d = nn.Conv2d(in_channels, out_channels, kernel_size, padding=padding, groups=groups)

    def forward(self, x):
        return self.conv2d(x)


batch_size = 32
in_channels = 256
out_channels = 256
height, width = 128, 128
kernel_size = 3
padding = 1
groups = 8


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, padding, groups]
