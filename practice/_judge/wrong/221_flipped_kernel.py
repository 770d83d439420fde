"""Wrong on purpose (judge --verify): the kernel reversed (weight[:, 0] on the current token)."""
import torch


def causal_conv1d(x, weight, past=None):
    B, T, C = x.shape
    K = weight.shape[-1]
    left = x.new_zeros(B, K - 1, C) if past is None else past
    xp = torch.cat([left, x], 1)
    return sum(weight[:, K - 1 - j] * xp[:, j:j + T] for j in range(K))
