"""ConvTranspose2d -> MaxPool2d(2) -> hardtanh -> spatial mean -> tanh."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, maxpool_kernel_size,
                 hardtanh_min, hardtanh_max):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding)
        self.maxpool = nn.MaxPool2d(kernel_size=maxpool_kernel_size)
        self.hardtanh_min = hardtanh_min
        self.hardtanh_max = hardtanh_max

    def forward(self, x):
        x = self.conv_transpose(x)
        x = self.maxpool(x)
        x = F.hardtanh(x, min_val=self.hardtanh_min, max_val=self.hardtanh_max)
        x = torch.mean(x, dim=(2, 3), keepdim=True)
        x = torch.tanh(x)
        return x


batch_size = 128
in_channels = 32
out_channels = 64
height, width = 64, 64
kernel_size = 4
stride = 2
padding = 1
maxpool_kernel_size = 2
hardtanh_min = -1.0
hardtanh_max = 1.0


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, maxpool_kernel_size, hardtanh_min,
            hardtanh_max]
