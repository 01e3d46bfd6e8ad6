"""Two-layer GRU over a batch of sequences (batch_first); returns the full output sequence of the top layer."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, num_layers):
        super().__init__()
        self.gru = nn.GRU(input_size, hidden_size, num_layers=num_layers, batch_first=True)

    def forward(self, x, h0):
        out, _ = self.gru(x, h0)
        return out


batch_size = 64
seq_len = 256
input_size = 512
hidden_size = 512
num_layers = 2


def get_inputs():
    return [torch.randn(batch_size, seq_len, input_size), torch.randn(num_layers, batch_size, hidden_size)]


def get_init_inputs():
    return [input_size, hidden_size, num_layers]
