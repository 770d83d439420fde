"""Wrong on purpose (judge --verify): past put in front of x newest first (flipped along the sequence)."""
import torch


def causal_conv1d(x, weight, past=None):
    B, T, C = x.shape
    K = weight.shape[-1]
    left = x.new_zeros(B, K - 1, C) if past is None else past.flip(1).to(x.dtype)
    xp = torch.cat([left, x], 1)
    return sum(weight[:, j].to(x.dtype) * xp[:, j:j + T] for j in range(K))
