"""ConvTranspose3d -> + a second input tensor -> x * hardswish(x)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding, output_padding=output_padding)

    def forward(self, x, add_input):
        x = self.conv_transpose(x)
        x = x + add_input
        x = x * F.hardswish(x)
        return x


batch_size = 32
in_channels = 16
out_channels = 16
depth, height, width = 16, 48, 48
kernel_size = 3
stride = 2
padding = 1
output_padding = 1


def get_inputs():
    return [torch.rand(batch_size, in_channels, depth, height, width),
            torch.randn(batch_size, out_channels, depth * stride, height * stride, width * stride)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, output_padding]
