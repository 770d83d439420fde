"""Wrong on purpose (judge --verify): always pads with zeros, even when past is given."""
import torch


def causal_conv1d(x, weight, past=None):
    B, T, C = x.shape
    K = weight.shape[-1]
    xp = torch.cat([x.new_zeros(B, K - 1, C), x], 1)
    return sum(weight[:, j] * xp[:, j:j + T] for j in range(K))
