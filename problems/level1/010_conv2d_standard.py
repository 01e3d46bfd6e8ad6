"""Standard 2D convolution (nn.Conv2d, 64 -> 128 channels, 3x3, padding 1) on 128x128 images."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, padding):
        super().__init__()
        self.conv2d = nn.Conv2d(in_channels, out_channels, kernel_size, padding=padding)

    def forward(self, x):
        return self.conv2d(x)


batch_size = 64
in_channels = 64
out_channels = 128
height, width = 128, 128
kernel_size = 3
padding = 1


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, padding]
