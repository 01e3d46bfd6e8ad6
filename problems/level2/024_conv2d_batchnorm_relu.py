"""Conv2d -> BatchNorm2d (training mode: batch statistics) -> ReLU."""
import torch
import torch.nn as nn

# BatchNorm statistics reduce over 128 * 126 * 126 = 2M values per channel; a correct fp32 implementation
# with a different summation order can differ slightly more than the default 1e-4.
ATOL = 1e-3
RTOL = 1e-3


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bn = nn.BatchNorm2d(out_channels)

    def forward(self, x):
        x = self.conv(x)
        x = self.bn(x)
        x = torch.relu(x)
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
