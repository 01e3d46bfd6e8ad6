"""Dilated 2D convolution (nn.Conv2d, 128 -> 128 channels, 3x3, dilation 2, padding 2) on 128x128 maps."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, padding, dilation):
        super().__init__()
        self.conv2d = nn.Conv2d(in_channels, out_channels, kernel_size, padding=padding, dilation=dilation)

    def forward(self, x):
        return self.conv2d(x)


batch_size = 16
in_channels = 128
out_channels = 128
height, width = 128, 128
kernel_size = 3
padding = 2
dilation = 2


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, padding, dilation]
