"""Standard 1D convolution (nn.Conv1d, 256 -> 256 channels, kernel 3, padding 1) over length-4096 sequences."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, padding):
        super().__init__()
        self.conv1d = nn.Conv1d(in_channels, out_channels, kernel_size, padding=padding)

    def forward(self, x):
        return self.conv1d(x)


batch_size = 64
in_channels = 256
out_channels = 256
length = 4096
kernel_size = 3
padding = 1


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, padding]
