"""Equivalent form (judge --verify must pass it): F.rms_norm in fp32; the gated norm in transformers'
order (the normalized value rounded to x's dtype before the weight)."""
import torch
import torch.nn.functional as F


def rms_norm(x, weight, eps=1e-6):
    return (F.rms_norm(x.float(), (x.shape[-1],), eps=eps) * (1.0 + weight.float())).to(x.dtype)


def gated_rms_norm(x, gate, weight, eps=1e-6):
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    h = weight * h.to(x.dtype)
    return (h * F.silu(gate.to(torch.float32))).to(x.dtype)
