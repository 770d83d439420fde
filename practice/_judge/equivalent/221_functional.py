"""Equivalent form (judge --verify must pass it): F.conv1d with groups = channels on (batch, channels, seq)."""
import torch
import torch.nn.functional as F


def causal_conv1d(x, weight, past=None):
    K = weight.shape[-1]
    h = x.transpose(1, 2)                                             # (B, C, T)
    left = F.pad(h, (K - 1, 0)) if past is None else torch.cat([past.transpose(1, 2), h], -1)
    return F.conv1d(left, weight[:, None, :], groups=weight.shape[0]).transpose(1, 2)
