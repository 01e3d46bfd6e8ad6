"""Batched matrix multiplication C[b] = A[b] @ B[b] (torch.bmm), 128 x (1024 x 512) @ (512 x 1024)."""
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
        return torch.bmm(A, B)


batch_size = 128
m = 1024
k = 512
n = 1024


def get_inputs():
    return [torch.randn(batch_size, m, k), torch.randn(batch_size, k, n)]


def get_init_inputs():
    return []
