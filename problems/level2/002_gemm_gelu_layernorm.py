"""Linear (GEMM + bias) -> GELU -> LayerNorm over the feature dimension."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.layer_norm = nn.LayerNorm(out_features)

    def forward(self, x):
        x = self.linear(x)
        x = F.gelu(x)
        x = self.layer_norm(x)
        return x


batch_size = 16384
in_features = 1024
out_features = 4096


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
