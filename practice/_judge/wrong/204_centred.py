"""Wrong on purpose (judge --verify): subtracts the mean first (LayerNorm's centring)."""
import torch

from practice._judge.solutions.s204 import gated_rms_norm  # noqa: F401


def rms_norm(x, weight, eps=1e-6):
    h = x.float()
    h = h - h.mean(-1, keepdim=True)
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * (1 + weight.float())).to(x.dtype)
