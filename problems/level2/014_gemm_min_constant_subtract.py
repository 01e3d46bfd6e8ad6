"""Linear (GEMM + bias) -> elementwise min with a learnable scalar -> subtract that scalar."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, constant):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.constant = nn.Parameter(torch.tensor(constant))

    def forward(self, x):
        x = self.linear(x)
        x = torch.min(x, self.constant)
        x = x - self.constant
        return x


batch_size = 8192
in_features = 2048
out_features = 4096
constant = 0.5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, constant]
