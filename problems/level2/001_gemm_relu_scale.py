"""Linear (GEMM + bias) -> ReLU -> multiply by a scalar."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = self.linear(x)
        x = torch.relu(x)
        x = x * self.scaling_factor
        return x


batch_size = 8192
in_features = 1024
out_features = 8192
scaling_factor = 0.5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scaling_factor]
