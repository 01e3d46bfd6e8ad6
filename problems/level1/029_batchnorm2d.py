"""BatchNorm2d in training mode (batch statistics over N, H, W per channel)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features)
        # non-trivial affine parameters so that a candidate ignoring them fails
        with torch.no_grad():
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.bn(x)


batch_size = 64
num_features = 64
height, width = 256, 256

# Per-channel statistics are reductions over N*H*W = 4M elements: a correct fp32 implementation with a
# different summation order (or one-pass vs Welford variance) differs by more than 1e-4 on the largest outputs.
ATOL = 1e-3
RTOL = 1e-3


def get_inputs():
    return [torch.randn(batch_size, num_features, height, width)]


def get_init_inputs():
    return [num_features]
