"""InstanceNorm2d (no affine): normalize each (sample, channel) plane over H, W."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        self.inorm = nn.InstanceNorm2d(num_features)

    def forward(self, x):
        return self.inorm(x)


batch_size = 32
num_features = 128
height, width = 256, 256


def get_inputs():
    return [torch.randn(batch_size, num_features, height, width)]


def get_init_inputs():
    return [num_features]
