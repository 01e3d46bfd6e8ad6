"""Depthwise 2D convolution (nn.Conv2d with groups = channels = 128, 3x3, padding 1) on 256x256 maps."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels, kernel_size, padding):
        super().__init__()
        self.conv2d = nn.Conv2d(channels, channels, kernel_size, padding=padding, groups=channels)

    def forward(self, x):
        return self.conv2d(x)


batch_size = 32
channels = 128
height, width = 256, 256
kernel_size = 3
padding = 1


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, kernel_size, padding]
