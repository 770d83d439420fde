"""Reference solution for 205."""
import torch


def l2norm(x, eps=1e-6):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)      # eps inside the root, on the sum
