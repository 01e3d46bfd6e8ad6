"""Conv2d -> InstanceNorm2d -> LeakyReLU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, negative_slope):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.instance_norm = nn.InstanceNorm2d(out_channels)
        self.negative_slope = negative_slope

    def forward(self, x):
        x = self.conv(x)
        x = self.instance_norm(x)
        x = F.leaky_relu(x, negative_slope=self.negative_slope)
        return x


batch_size = 128
in_channels = 16
out_channels = 64
height, width = 128, 128
kernel_size = 3
negative_slope = 0.1


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, negative_slope]
