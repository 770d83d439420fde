"""Wrong on purpose (judge --verify): the convolution right, then silu, which the layer applies after it."""
import torch
import torch.nn.functional as F


def causal_conv1d(x, weight, past=None):
    B, T, C = x.shape
    K = weight.shape[-1]
    left = x.new_zeros(B, K - 1, C) if past is None else past.to(x.dtype)
    xp = torch.cat([left, x], 1)
    return F.silu(sum(weight[:, j].to(x.dtype) * xp[:, j:j + T] for j in range(K)))
