"""Tall-skinny matrix multiplication C = A @ B with A (262144 x 512) and B (512 x 256)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


M = 262144
K = 512
N = 256


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
