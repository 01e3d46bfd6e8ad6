"""Linear (GEMM + bias) -> multiply by a per-feature scale vector -> BatchNorm1d (training mode: batch statistics)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, scale_shape):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = nn.Parameter(torch.randn(scale_shape))
        self.bn = nn.BatchNorm1d(out_features)

    def forward(self, x):
        x = self.linear(x)
        x = x * self.scale
        x = self.bn(x)
        return x


batch_size = 16384
in_features = 1024
out_features = 4096
scale_shape = (out_features,)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale_shape]
