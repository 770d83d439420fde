"""Wrong on purpose (judge --verify): uses 1 + weight in the gated norm (its weight is plain)."""
import torch
import torch.nn.functional as F

from practice._judge.solutions.s204 import rms_norm  # noqa: F401


def gated_rms_norm(x, gate, weight, eps=1e-6):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return ((1 + weight.float()) * h * F.silu(gate.float())).to(x.dtype)
