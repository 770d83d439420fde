"""Wrong on purpose (judge --verify): divides by the RMS (mean of squares), not the length."""
import torch


def l2norm(x, eps=1e-6):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)
