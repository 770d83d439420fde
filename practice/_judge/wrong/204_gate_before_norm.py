"""Wrong on purpose (judge --verify): multiplies by the gate before normalizing."""
import torch
import torch.nn.functional as F

from practice._judge.solutions.s204 import rms_norm  # noqa: F401


def gated_rms_norm(x, gate, weight, eps=1e-6):
    h = x.float() * F.silu(gate.float())
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (weight.float() * h).to(x.dtype)
