"""DenseNet dense block: six BN-ReLU-conv1x1(bottleneck)-BN-ReLU-conv3x3 layers, each fed the concatenation of all previous feature maps (BatchNorm in training mode)."""
import torch
import torch.nn as nn


class DenseLayer(nn.Module):
    def __init__(self, in_channels, growth_rate, bn_size):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(in_channels)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(in_channels, bn_size * growth_rate, kernel_size=1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth_rate)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth_rate, growth_rate, kernel_size=3, padding=1, bias=False)

    def forward(self, features):
        x = torch.cat(features, dim=1)
        x = self.conv1(self.relu1(self.norm1(x)))
        return self.conv2(self.relu2(self.norm2(x)))


class Model(nn.Module):
    def __init__(self, num_layers, in_channels, growth_rate, bn_size):
        super().__init__()
        self.layers = nn.ModuleList(
            [DenseLayer(in_channels + i * growth_rate, growth_rate, bn_size) for i in range(num_layers)]
        )

    def forward(self, x):
        features = [x]
        for layer in self.layers:
            features.append(layer(features))
        return torch.cat(features, dim=1)


batch_size = 64
num_layers = 6
in_channels = 64
growth_rate = 32
bn_size = 4
height, width = 56, 56

# Twelve training-mode BatchNorms and twelve convolutions, with later layers fed by earlier
# ones: fp32 summation-order differences compound through the chain, so allow 1e-3.
ATOL = 1e-3
RTOL = 1e-3


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [num_layers, in_channels, growth_rate, bn_size]
