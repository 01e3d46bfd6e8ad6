"""Linear (GEMM + bias) -> GELU -> softmax over the features."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = self.linear(x)
        x = F.gelu(x)
        x = torch.softmax(x, dim=1)
        return x


batch_size = 32768
in_features = 2048
out_features = 1024      # softmax rows of 1024: entries ~1e-3, well above atol (zeros must fail)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
