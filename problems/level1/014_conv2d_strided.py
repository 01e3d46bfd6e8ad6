"""Strided 2D convolution (nn.Conv2d, 64 -> 128 channels, 5x5, stride 2, padding 2): 256x256 -> 128x128."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding):
        super().__init__()
        self.conv2d = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding)

    def forward(self, x):
        return self.conv2d(x)


batch_size = 32
in_channels = 64
out_channels = 128
height, width = 256, 256
kernel_size = 5
stride = 2
padding = 2


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding]
