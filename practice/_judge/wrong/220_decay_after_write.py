"""Wrong on purpose (judge --verify): writes first, then applies the decay."""
import torch

from practice._judge.solutions.s220 import read_state  # noqa: F401


def delta_rule_step(S, k, v, g, beta):
    error = beta[..., None] * (v - (k[..., None, :] @ S).squeeze(-2))
    S = S + k[..., :, None] * error[..., None, :]
    return S * torch.exp(g)[..., None, None]
