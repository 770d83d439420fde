"""Wrong on purpose (judge --verify): torch.var's default divides by n - 1."""
import torch


def layer_norm(x, eps=1e-6):
    h = x.float()
    return ((h - h.mean(-1, keepdim=True)) * torch.rsqrt(h.var(-1, keepdim=True) + eps)).to(x.dtype)


def rms_from_moments(x):
    h = x.float()
    return (h.var(-1) + h.mean(-1) ** 2).sqrt()
