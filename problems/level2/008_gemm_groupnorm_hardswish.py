"""Linear (GEMM + bias) -> GroupNorm over feature groups -> HardSwish."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features, out_features, num_groups):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.group_norm = nn.GroupNorm(num_groups, out_features)

    def forward(self, x):
        x = self.linear(x)
        x = self.group_norm(x)
        x = F.hardswish(x)
        return x


batch_size = 16384
in_features = 1024
out_features = 2048
num_groups = 32


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, num_groups]
