"""Another correct solution for 273: F.linear for each product, and torch.addmm for the merge
(W + scale * B @ A in one fp32 call)."""
import torch
import torch.nn.functional as F


def lora_forward(x, W, A, B, alpha, r):
    scale = alpha / r
    y = F.linear(x, W)
    return (y.to(torch.float32) + scale * F.linear(F.linear(x.to(torch.float32), A), B)).to(W.dtype)


def lora_merge(W, A, B, alpha, r):
    return torch.addmm(W.to(torch.float32), B, A, alpha=alpha / r).to(W.dtype)
