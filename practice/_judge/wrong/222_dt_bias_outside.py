"""Wrong on purpose (judge --verify): dt_bias added after the softplus instead of inside it."""
import torch
import torch.nn.functional as F


def log_decay(a, A_log, dt_bias):
    return -torch.exp(A_log.float()) * (F.softplus(a.float()) + dt_bias.float())


def write_strength(b):
    return torch.sigmoid(b.float())
