"""Linear (GEMM + bias) -> softmax over the features -> multiply by a scalar."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = self.linear(x)
        x = torch.softmax(x, dim=1)
        x = x * self.scaling_factor
        return x


batch_size = 32768
in_features = 1024
out_features = 1024      # softmax rows of 1024: entries ~1e-3, times 16 -> ~1.6e-2, far above atol
scaling_factor = 16.0


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scaling_factor]
