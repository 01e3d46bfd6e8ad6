"""Matrix multiplication with a small inner dimension: C = A @ B, A (24576 x 32), B (32 x 24576); output-write bound."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


M = 24576
K = 32
N = 24576


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
