"""Triplet margin loss (margin 1.0, L2 distance, mean over the batch) -> scalar."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, margin):
        super().__init__()
        self.loss_fn = nn.TripletMarginLoss(margin=margin)

    def forward(self, anchor, positive, negative):
        return self.loss_fn(anchor, positive, negative)


batch_size = 32768
dim = 4096
margin = 1.0

# Scalar mean over 32768 per-row losses built from 4096-term distances: allow for a different fp32
# summation order.
ATOL = 1e-4
RTOL = 1e-3


def get_inputs():
    # positives/negatives are noisy copies of the anchor with random noise levels per call; the positive is
    # at least as noisy as the negative so that the loss is positive and varies between calls
    sn = 0.5 + 0.5 * torch.rand(())
    sp = sn + 0.05 * torch.rand(())
    anchor = torch.randn(batch_size, dim)
    positive = anchor + sp * torch.randn(batch_size, dim)
    negative = anchor + sn * torch.randn(batch_size, dim)
    return [anchor, positive, negative]


def get_init_inputs():
    return [margin]
