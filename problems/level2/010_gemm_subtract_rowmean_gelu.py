"""Linear (GEMM + bias) -> subtract the per-row mean -> GELU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = self.linear(x)
        x = x - x.mean(dim=1, keepdim=True)
        x = F.gelu(x)
        return x


batch_size = 8192
in_features = 1024
out_features = 8192


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
