"""Equivalent form (judge --verify must pass it): torch.linalg.vector_norm for the length."""
import torch


def l2norm(x, eps=1e-6):
    length2 = torch.linalg.vector_norm(x, dim=-1, keepdim=True) ** 2
    return x / torch.sqrt(length2 + eps)
