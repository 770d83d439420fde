"""Wrong on purpose (judge --verify): the gated norm adds eps to the root instead of inside it."""
import torch
import torch.nn.functional as F


def rms_norm(x, weight, eps=1e-6):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (h * (1.0 + weight.float())).to(x.dtype)


def gated_rms_norm(x, gate, weight, eps=1e-6):
    h = x.float()
    h = h / (h.pow(2).mean(-1, keepdim=True).sqrt() + eps)
    return (weight.float() * h * F.silu(gate.float())).to(x.dtype)
