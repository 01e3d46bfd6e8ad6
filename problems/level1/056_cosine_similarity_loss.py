"""Cosine-similarity loss: mean(1 - cosine_similarity(predictions, targets, dim=1)) -> scalar."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        cosine_sim = F.cosine_similarity(predictions, targets, dim=1)
        return torch.mean(1 - cosine_sim)


batch_size = 65536
dim = 4096

# Scalar mean over 65536 per-row cosine similarities (4096-term dot products and norms each): allow for a
# different fp32 summation order.
ATOL = 1e-4
RTOL = 1e-3


def get_inputs():
    # targets correlated with predictions by a random factor per call, so the loss varies between calls
    alpha = 2.0 * torch.randn(())
    predictions = torch.randn(batch_size, dim)
    targets = alpha * predictions + torch.randn(batch_size, dim)
    return [predictions, targets]


def get_init_inputs():
    return []
