"""Transposed 2D convolution (nn.ConvTranspose2d, 128 -> 64 channels, 4x4, stride 2, padding 1): 64x64 -> 128x128."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding):
        super().__init__()
        self.conv_transpose2d = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                                   padding=padding)

    def forward(self, x):
        return self.conv_transpose2d(x)


batch_size = 64
in_channels = 128
out_channels = 64
height, width = 64, 64
kernel_size = 4
stride = 2
padding = 1


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding]
