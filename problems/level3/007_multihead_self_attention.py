"""Multi-head self-attention layer (nn.MultiheadAttention, batch_first, no dropout) on a batch of token sequences."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.attn = nn.MultiheadAttention(embed_dim, num_heads, dropout=0.0, batch_first=True)

    def forward(self, x):
        out, _ = self.attn(x, x, x, need_weights=False)
        return out


batch_size = 32
seq_len = 512
embed_dim = 768
num_heads = 12


def get_inputs():
    return [torch.randn(batch_size, seq_len, embed_dim)]


def get_init_inputs():
    return [embed_dim, num_heads]
