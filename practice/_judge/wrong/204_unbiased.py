"""Wrong on purpose (judge --verify): divides the sum of squares by n - 1."""
import torch

from practice._judge.solutions.s204 import gated_rms_norm  # noqa: F401


def rms_norm(x, weight, eps=1e-6):
    h = x.float()
    ms = h.pow(2).sum(-1, keepdim=True) / (h.shape[-1] - 1)
    return (h * torch.rsqrt(ms + eps) * (1 + weight.float())).to(x.dtype)
