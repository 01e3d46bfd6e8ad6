"""ConvNeXt block: depthwise 7x7 conv, LayerNorm over channels (channels-last), Linear 4x expansion, GELU, Linear projection, layer scale, residual add."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim, layer_scale_init_value):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(layer_scale_init_value * torch.ones(dim))

    def forward(self, x):
        shortcut = x
        x = self.dwconv(x)
        x = x.permute(0, 2, 3, 1)  # (N, C, H, W) -> (N, H, W, C)
        x = self.norm(x)
        x = self.pwconv1(x)
        x = self.act(x)
        x = self.pwconv2(x)
        x = self.gamma * x
        x = x.permute(0, 3, 1, 2)  # (N, H, W, C) -> (N, C, H, W)
        return shortcut + x


batch_size = 32
dim = 256
height, width = 56, 56
# ConvNeXt initialises the layer scale to 1e-6, which would make the block output equal its
# input to within tolerance (a degenerate problem); 1.0 keeps the residual branch visible.
layer_scale_init_value = 1.0


def get_inputs():
    return [torch.randn(batch_size, dim, height, width)]


def get_init_inputs():
    return [dim, layer_scale_init_value]
