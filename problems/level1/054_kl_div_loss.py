"""KL divergence KL(targets || predictions) with reduction='batchmean' for row distributions of width 4096."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return F.kl_div(torch.log(predictions), targets, reduction="batchmean")


batch_size = 65536
num_classes = 4096

# Scalar sum over 268M terms divided by the batch: allow for a different fp32 summation order.
ATOL = 1e-4
RTOL = 1e-3


def get_inputs():
    # valid (strictly positive) distributions; random temperatures per call make the loss vary between calls
    sp = 0.5 + 1.5 * torch.rand(())
    st = 0.5 + 1.5 * torch.rand(())
    predictions = torch.softmax(sp * torch.randn(batch_size, num_classes), dim=-1)
    targets = torch.softmax(st * torch.randn(batch_size, num_classes), dim=-1)
    return [predictions, targets]


def get_init_inputs():
    return []
