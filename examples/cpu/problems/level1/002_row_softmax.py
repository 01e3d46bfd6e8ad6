"""CPU example: softmax over each row."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


rows, cols = 128, 1024


def get_inputs():
    return [torch.randn(rows, cols) * 3]


def get_init_inputs():
    return []
