"""Linear (GEMM + bias) -> Swish (x * sigmoid(x)) -> + bias vector -> clamp."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, clamp_min, clamp_max):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.1)
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x):
        x = self.linear(x)
        x = x * torch.sigmoid(x)
        x = x + self.bias
        x = torch.clamp(x, min=self.clamp_min, max=self.clamp_max)
        return x


batch_size = 8192
in_features = 512
out_features = 8192
clamp_min = -0.2
clamp_max = 0.8


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, clamp_min, clamp_max]
