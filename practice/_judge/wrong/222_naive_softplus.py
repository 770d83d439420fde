"""Wrong on purpose (judge --verify): softplus written as log(1 + exp(x)) in fp32, which loses a small g."""
import torch

from practice._judge.solutions.s222 import write_strength  # noqa: F401


def log_decay(a, A_log, dt_bias):
    x = a.float() + dt_bias.float()
    return -A_log.float().exp() * torch.log(1 + torch.exp(x))
