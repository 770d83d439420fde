"""Wrong on purpose (judge --verify): adds eps to the root instead of inside it."""
import torch

from practice._judge.solutions.s204 import gated_rms_norm  # noqa: F401


def rms_norm(x, weight, eps=1e-6):
    h = x.float()
    return (h / (h.pow(2).mean(-1, keepdim=True).sqrt() + eps) * (1 + weight.float())).to(x.dtype)
