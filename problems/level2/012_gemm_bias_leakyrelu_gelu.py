"""Linear (GEMM + bias) -> + extra bias vector -> LeakyReLU -> GELU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features, out_features, negative_slope):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.1)
        self.negative_slope = negative_slope

    def forward(self, x):
        x = self.linear(x)
        x = x + self.bias
        x = F.leaky_relu(x, negative_slope=self.negative_slope)
        x = F.gelu(x)
        return x


batch_size = 8192
in_features = 512
out_features = 8192
negative_slope = 0.1


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, negative_slope]
