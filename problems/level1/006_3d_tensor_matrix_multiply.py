"""3D tensor x matrix product: C[b, i, k] = sum_j A[b, i, j] * B[j, k] (einsum 'bij,jk->bik')."""
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
        return torch.einsum("bij,jk->bik", A, B)


batch_size = 128
dim_i = 1024
dim_j = 512
dim_k = 1024


def get_inputs():
    return [torch.randn(batch_size, dim_i, dim_j), torch.randn(dim_j, dim_k)]


def get_init_inputs():
    return []
