"""Two-layer LSTM over a batch of sequences (batch_first) followed by a Linear head on the last time step's output."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, num_layers, output_size):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers=num_layers, batch_first=True)
        self.fc = nn.Linear(hidden_size, output_size)

    def forward(self, x, h0, c0):
        out, _ = self.lstm(x, (h0, c0))
        return self.fc(out[:, -1, :])


batch_size = 128
seq_len = 128
input_size = 256
hidden_size = 512
num_layers = 2
output_size = 256


def get_inputs():
    return [
        torch.randn(batch_size, seq_len, input_size),
        torch.randn(num_layers, batch_size, hidden_size),
        torch.randn(num_layers, batch_size, hidden_size),
    ]


def get_init_inputs():
    return [input_size, hidden_size, num_layers, output_size]
