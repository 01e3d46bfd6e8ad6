"""SE-ResNet basic block: conv3x3-BN-ReLU-conv3x3-BN, squeeze-and-excitation channel gating (avgpool, FC-ReLU-FC-sigmoid, scale), identity shortcut, add, ReLU (BatchNorm in training mode)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels, reduction):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.se_fc1 = nn.Linear(channels, channels // reduction)
        self.se_fc2 = nn.Linear(channels // reduction, channels)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        # squeeze-and-excitation
        s = out.mean(dim=(2, 3))
        s = torch.sigmoid(self.se_fc2(self.relu(self.se_fc1(s))))
        out = out * s[:, :, None, None]
        out = out + identity
        return self.relu(out)


batch_size = 128
channels = 64
reduction = 4
height, width = 56, 56


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, reduction]
