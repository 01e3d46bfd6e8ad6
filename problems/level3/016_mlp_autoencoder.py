"""Fully connected autoencoder: encoder 4096-2048-512-128 with ReLU, decoder 128-512-2048-4096 with ReLU and a sigmoid output."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_dim, hidden_dims, latent_dim):
        super().__init__()
        enc = []
        prev = input_dim
        for h in hidden_dims:
            enc += [nn.Linear(prev, h), nn.ReLU()]
            prev = h
        enc.append(nn.Linear(prev, latent_dim))
        self.encoder = nn.Sequential(*enc)
        dec = []
        prev = latent_dim
        for h in reversed(hidden_dims):
            dec += [nn.Linear(prev, h), nn.ReLU()]
            prev = h
        dec += [nn.Linear(prev, input_dim), nn.Sigmoid()]
        self.decoder = nn.Sequential(*dec)
        # He initialisation keeps the activations at unit scale through the ReLU stack (with the
        # default init the signal shrinks ~150x and the sigmoid output is ~0.5 everywhere).
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                nn.init.zeros_(m.bias)

    def forward(self, x):
        return self.decoder(self.encoder(x))


batch_size = 4096
input_dim = 4096
hidden_dims = [2048, 512]
latent_dim = 128


def get_inputs():
    return [torch.rand(batch_size, input_dim)]


def get_init_inputs():
    return [input_dim, hidden_dims, latent_dim]
