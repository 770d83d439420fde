"""Reference solution for 206."""
import torch


def layer_norm(x, eps=1e-6):
    h = x.float()
    mu = h.mean(-1, keepdim=True)
    var = h.var(-1, unbiased=False, keepdim=True)                    # population variance: divide by n
    return ((h - mu) * torch.rsqrt(var + eps)).to(x.dtype)


def rms_from_moments(x):
    h = x.float()
    return (h.var(-1, unbiased=False) + h.mean(-1) ** 2).sqrt()      # RMS^2 = sigma^2 + mu^2
