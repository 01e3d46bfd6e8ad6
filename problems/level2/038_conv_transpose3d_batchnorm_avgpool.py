"""ConvTranspose3d -> BatchNorm3d (training mode: batch statistics) -> AvgPool3d(2)."""
import torch
import torch.nn as nn

# BatchNorm statistics reduce over 32 * 32 * 64 * 64 = 4.2M values per channel; a correct fp32 implementation
# with a different summation order can differ slightly more than the default 1e-4.
ATOL = 1e-3
RTOL = 1e-3


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding, output_padding=output_padding)
        self.batch_norm = nn.BatchNorm3d(out_channels)
        self.avg_pool = nn.AvgPool3d(kernel_size=2)

    def forward(self, x):
        x = self.conv_transpose(x)
        x = self.batch_norm(x)
        x = self.avg_pool(x)
        return x


batch_size = 32
in_channels = 32
out_channels = 32
depth, height, width = 16, 32, 32
kernel_size = 3
stride = 2
padding = 1
output_padding = 1


def get_inputs():
    return [torch.rand(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, output_padding]
