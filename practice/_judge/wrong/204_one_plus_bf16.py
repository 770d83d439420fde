"""Wrong on purpose (judge --verify): adds 1 to the weight in bf16, rounding it before the upcast."""
import torch

from practice._judge.solutions.s204 import gated_rms_norm  # noqa: F401


def rms_norm(x, weight, eps=1e-6):
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * (1 + weight).float()).to(x.dtype)
