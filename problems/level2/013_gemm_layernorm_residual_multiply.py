"""Linear (GEMM + bias) -> LayerNorm -> + residual y -> * y."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.layer_norm = nn.LayerNorm(out_features)

    def forward(self, x, y):
        x = self.linear(x)
        x = self.layer_norm(x)
        x = x + y
        x = x * y
        return x


batch_size = 8192
in_features = 1024
out_features = 8192


def get_inputs():
    return [torch.randn(batch_size, in_features), torch.randn(batch_size, out_features)]


def get_init_inputs():
    return [in_features, out_features]
