"""Multi-layer perceptron: four Linear layers with ReLU between them (4096 -> 4096 -> 4096 -> 4096 -> 1024)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size, hidden_sizes, output_size):
        super().__init__()
        layers = []
        prev = input_size
        for h in hidden_sizes:
            layers.append(nn.Linear(prev, h))
            layers.append(nn.ReLU())
            prev = h
        layers.append(nn.Linear(prev, output_size))
        self.network = nn.Sequential(*layers)

    def forward(self, x):
        return self.network(x)


batch_size = 2048
input_size = 4096
hidden_sizes = [4096, 4096, 4096]
output_size = 1024


def get_inputs():
    return [torch.randn(batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden_sizes, output_size]
