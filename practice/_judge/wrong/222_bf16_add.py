"""Wrong on purpose (judge --verify): a + dt_bias added in bf16, then upcast for the softplus."""
import torch
import torch.nn.functional as F


def log_decay(a, A_log, dt_bias):
    return -torch.exp(A_log.float()) * F.softplus((a + dt_bias).float())


def write_strength(b):
    return torch.sigmoid(b.float())
