"""Wrong on purpose (judge --verify): averages over the first dimension instead of the last."""
import torch

from practice._judge.solutions.s204 import gated_rms_norm  # noqa: F401


def rms_norm(x, weight, eps=1e-6):
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(0, keepdim=True) + eps) * (1 + weight.float())).to(x.dtype)
