"""Wrong on purpose (judge --verify): forgets to subtract the mean (that is RMSNorm)."""
import torch

from practice._judge.solutions.s206 import rms_from_moments  # noqa: F401


def layer_norm(x, eps=1e-6):
    h = x.float()
    return (h * torch.rsqrt(h.var(-1, unbiased=False, keepdim=True) + eps)).to(x.dtype)
