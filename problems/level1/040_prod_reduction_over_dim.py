"""Product over a short (length-32) middle dimension of a (batch, 32, 32768) tensor with entries near 1."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.prod(x, dim=self.dim)


batch_size = 1536
dim1 = 32
dim2 = 32768
reduce_dim = 1


def get_inputs():
    # entries 1 + 0.2*N(0,1): products of 32 of them are log-normal (typically e^-2..e^2), no under/overflow
    return [1.0 + 0.2 * torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return [reduce_dim]
