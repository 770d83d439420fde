"""Wrong on purpose (judge --verify): plain linear attention, adds k (beta v)^T without reading first."""
import torch

from practice._judge.solutions.s220 import read_state  # noqa: F401


def delta_rule_step(S, k, v, g, beta):
    return S * torch.exp(g)[..., None, None] + k[..., :, None] * (beta[..., None] * v)[..., None, :]
