"""Wrong on purpose (judge --verify): exp(A_log) without the minus sign."""
import torch
import torch.nn.functional as F

from practice._judge.solutions.s222 import write_strength  # noqa: F401


def log_decay(a, A_log, dt_bias):
    return torch.exp(A_log.float()) * F.softplus(a.float() + dt_bias.float())
