"""CPU example: ReLU, then a constant scale."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.relu(x) * self.scale


rows, cols = 256, 1024


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return [2.5]
