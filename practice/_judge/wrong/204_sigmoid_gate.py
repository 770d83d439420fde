"""Wrong on purpose (judge --verify): gates with sigmoid instead of silu."""
import torch

from practice._judge.solutions.s204 import rms_norm  # noqa: F401


def gated_rms_norm(x, gate, weight, eps=1e-6):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (weight.float() * h * torch.sigmoid(gate.float())).to(x.dtype)
