"""ConvTranspose2d -> Mish -> + scalar -> hardtanh -> * scalar."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, add_value, scale):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding)
        self.add_value = add_value
        self.scale = scale

    def forward(self, x):
        x = self.conv_transpose(x)
        x = F.mish(x)
        x = x + self.add_value
        x = F.hardtanh(x, min_val=-1.0, max_val=1.0)
        x = x * self.scale
        return x


batch_size = 128
in_channels = 32
out_channels = 64
height, width = 64, 64
kernel_size = 4
stride = 2
padding = 1
add_value = 0.25
scale = 2.0


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, add_value, scale]
