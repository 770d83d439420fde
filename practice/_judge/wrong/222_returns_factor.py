"""Wrong on purpose (judge --verify): returns the decay factor exp(g) instead of the log decay g."""
import torch
import torch.nn.functional as F


def log_decay(a, A_log, dt_bias):
    return torch.exp(-torch.exp(A_log.float()) * F.softplus(a.float() + dt_bias.float()))


def write_strength(b):
    return torch.sigmoid(b.float())
