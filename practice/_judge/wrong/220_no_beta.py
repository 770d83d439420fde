"""Wrong on purpose (judge --verify): writes the whole error, without beta."""
import torch

from practice._judge.solutions.s220 import read_state  # noqa: F401


def delta_rule_step(S, k, v, g, beta):
    S = S * torch.exp(g)[..., None, None]
    error = v - (k[..., None, :] @ S).squeeze(-2)
    return S + k[..., :, None] * error[..., None, :]
