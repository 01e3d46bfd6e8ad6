"""Batched matrix multiplication C[b] = A[b] @ B[b] (torch.bmm), 128 x (1024 x 512) @ (512 x 1024)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.bmm(A, B)


batch_size = 128
m = 1024
k = 512
n = 1024


def get_inputs():
    return [torch.randn(batch_size, m, k), torch.randn(batch_size, k, n)]


def get_init_inputs():
    return []
