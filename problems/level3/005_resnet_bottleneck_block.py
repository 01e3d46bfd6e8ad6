"""ResNet bottleneck block: conv1x1(reduce)-BN-ReLU, conv3x3-BN-ReLU, conv1x1(expand)-BN, identity shortcut, add, ReLU (BatchNorm in training mode)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, planes, expansion):
        super().__init__()
        width = planes
        self.conv1 = nn.Conv2d(in_channels, width, kernel_size=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, planes * expansion, kernel_size=1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * expansion)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out = out + identity
        return self.relu(out)


batch_size = 128
in_channels = 256
planes = 64
expansion = 4
height, width = 56, 56


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, planes, expansion]
