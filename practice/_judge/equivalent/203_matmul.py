"""Equivalent form (judge --verify must pass it): F.embedding and torch.matmul."""
import torch
import torch.nn.functional as F


def embed(ids, E):
    return F.embedding(ids, E)


def tied_logits(h, E):
    return torch.matmul(h.to(torch.float32), E.to(torch.float32).transpose(0, 1))
