"""MobileNetV2 inverted-residual block: 1x1 expand-BN-ReLU6, 3x3 depthwise-BN-ReLU6, 1x1 project-BN, residual add (BatchNorm in training mode)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels, expand_ratio):
        super().__init__()
        hidden = channels * expand_ratio
        self.expand_conv = nn.Conv2d(channels, hidden, kernel_size=1, bias=False)
        self.expand_bn = nn.BatchNorm2d(hidden)
        self.dw_conv = nn.Conv2d(hidden, hidden, kernel_size=3, stride=1, padding=1, groups=hidden, bias=False)
        self.dw_bn = nn.BatchNorm2d(hidden)
        self.project_conv = nn.Conv2d(hidden, channels, kernel_size=1, bias=False)
        self.project_bn = nn.BatchNorm2d(channels)
        self.act = nn.ReLU6(inplace=True)

    def forward(self, x):
        out = self.act(self.expand_bn(self.expand_conv(x)))
        out = self.act(self.dw_bn(self.dw_conv(out)))
        out = self.project_bn(self.project_conv(out))
        return x + out


batch_size = 128
channels = 32
expand_ratio = 6
height, width = 56, 56


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, expand_ratio]
