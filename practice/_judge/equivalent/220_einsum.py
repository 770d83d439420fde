"""Equivalent form (judge --verify must pass it): einsum for the reads and the outer product."""
import torch


def delta_rule_step(S, k, v, g, beta):
    S = S * g.exp().unsqueeze(-1).unsqueeze(-1)
    error = beta.unsqueeze(-1) * (v - torch.einsum("bhk,bhkv->bhv", k, S))
    return S + torch.einsum("bhk,bhv->bhkv", k, error)


def read_state(S, q):
    return torch.einsum("bhk,bhkv->bhv", q, S)
