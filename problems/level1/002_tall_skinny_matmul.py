"""Tall-skinny matrix multiplication C = A @ B with A (262144 x 512) and B (512 x 256)."""
import torch
import torch.nn as nn

# K = 512 on randn inputs: cuBLAS itself is ~45-50% of the default 1e-4 tolerance away from an fp64
# reference on the worst of ~1e8 outputs (magnitude ~20), so a correct fp32 kernel with another
# accumulation order can exceed 1e-4; 1e-3 still rejects TF32 (error ~1e-2) and constant outputs.
ATOL = 1e-3
RTOL = 1e-3


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
