"""A/A control: the reference's own PyTorch ops; its speedup should read about 1."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.relu(x) * self.scale
