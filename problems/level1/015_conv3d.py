"""Standard 3D convolution (nn.Conv3d, 32 -> 64 channels, 3x3x3, padding 1) on 32x64x64 volumes."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, padding):
        super().__init__()
        self.conv3d = nn.Conv3d(in_channels, out_channels, kernel_size, padding=padding)

    def forward(self, x):
        return self.conv3d(x)


batch_size = 8
in_channels = 32
out_channels = 64
depth, height, width = 32, 64, 64
kernel_size = 3
padding = 1


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, padding]
