"""Transposed 1D convolution (nn.ConvTranspose1d, 256 -> 256 channels, kernel 4, stride 2, padding 1): 4096 -> 8192."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding):
        super().__init__()
        self.conv_transpose1d = nn.ConvTranspose1d(in_channels, out_channels, kernel_size, stride=stride,
                                                   padding=padding)

    def forward(self, x):
        return self.conv_transpose1d(x)


batch_size = 64
in_channels = 256
out_channels = 256
length = 4096
kernel_size = 4
stride = 2
padding = 1


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding]
