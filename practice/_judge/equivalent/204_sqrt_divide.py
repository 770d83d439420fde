"""Equivalent form (judge --verify must pass it): sqrt and divide; silu written as x * sigmoid(x)."""
import torch


def rms_norm(x, weight, eps=1e-6):
    h = x.float()
    return (h / torch.sqrt((h * h).mean(-1, keepdim=True) + eps) * (1 + weight.float())).to(x.dtype)


def gated_rms_norm(x, gate, weight, eps=1e-6):
    h = x.float()
    g = gate.float()
    h = h / torch.sqrt(h.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (h * weight.float() * (g * torch.sigmoid(g))).to(x.dtype)
