"""Conv2d -> GELU -> global average pooling -> flatten to (batch, channels)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        x = self.conv(x)
        x = F.gelu(x)
        x = F.adaptive_avg_pool2d(x, 1)
        x = x.flatten(1)
        return x


batch_size = 128
in_channels = 16
out_channels = 64
height, width = 128, 128
kernel_size = 3


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
