"""Equivalent form (judge --verify must pass it): F.linear in fp32, x * sigmoid(x) for silu, one rounding."""
import torch
import torch.nn.functional as F


def swiglu_mlp(x, gate_weight, up_weight, down_weight):
    h = x.float()
    g = F.linear(h, gate_weight.float())
    u = F.linear(h, up_weight.float())
    return F.linear(g * torch.sigmoid(g) * u, down_weight.float()).to(x.dtype)
