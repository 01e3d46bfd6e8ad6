"""Linear (GEMM + bias) -> AvgPool1d over the features -> GELU -> multiply by a scalar -> max over the features."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features, out_features, pool_kernel_size, scale_factor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.avg_pool = nn.AvgPool1d(kernel_size=pool_kernel_size)
        self.scale_factor = scale_factor

    def forward(self, x):
        x = self.linear(x)
        x = self.avg_pool(x.unsqueeze(1)).squeeze(1)
        x = F.gelu(x)
        x = x * self.scale_factor
        x = torch.max(x, dim=1).values
        return x


batch_size = 16384
in_features = 1024
out_features = 4096
pool_kernel_size = 4
scale_factor = 2.0


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, pool_kernel_size, scale_factor]
