"""Wrong on purpose (judge --verify): uses A_log as the rate, without exp."""
import torch.nn.functional as F

from practice._judge.solutions.s222 import write_strength  # noqa: F401


def log_decay(a, A_log, dt_bias):
    return -A_log.float() * F.softplus(a.float() + dt_bias.float())
