"""Wrong on purpose (judge --verify): pads on the right, so each output sees later tokens."""
import torch


def causal_conv1d(x, weight, past=None):
    B, T, C = x.shape
    K = weight.shape[-1]
    xp = torch.cat([x, x.new_zeros(B, K - 1, C)], 1)
    return sum(weight[:, j] * xp[:, j:j + T] for j in range(K))
