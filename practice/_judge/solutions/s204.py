"""Reference solution for 204."""
import torch
import torch.nn.functional as F


def rms_norm(x, weight, eps=1e-6):
    h = x.float()                                                    # statistics in fp32
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (h * (1.0 + weight.float())).to(x.dtype)                  # zero-centred weight, one cast


def gated_rms_norm(x, gate, weight, eps=1e-6):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (weight.float() * h * F.silu(gate.float())).to(x.dtype)   # plain weight, then the gate
