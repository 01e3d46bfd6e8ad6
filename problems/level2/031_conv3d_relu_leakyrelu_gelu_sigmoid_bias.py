"""Conv3d -> ReLU -> LeakyReLU -> GELU -> sigmoid -> + per-channel bias."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        x = self.conv(x)
        x = torch.relu(x)
        x = F.leaky_relu(x, negative_slope=0.01)
        x = F.gelu(x)
        x = torch.sigmoid(x)
        x = x + self.bias
        return x


batch_size = 16
in_channels = 8
out_channels = 32
depth, height, width = 24, 128, 128
kernel_size = 3
bias_shape = (out_channels, 1, 1, 1)


def get_inputs():
    return [torch.rand(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, bias_shape]
