"""Conv2d -> subtract a scalar -> Mish -> Mish."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, subtract_value):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.subtract_value = subtract_value

    def forward(self, x):
        x = self.conv(x)
        x = x - self.subtract_value
        x = F.mish(x)
        x = F.mish(x)
        return x


batch_size = 32
in_channels = 16
out_channels = 64
height, width = 256, 256
kernel_size = 3
subtract_value = 0.5


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, subtract_value]
