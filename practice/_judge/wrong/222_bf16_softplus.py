"""Wrong on purpose (judge --verify): a + dt_bias and softplus in the inputs' dtype (bf16), not fp32."""
import torch
import torch.nn.functional as F

from practice._judge.solutions.s222 import write_strength  # noqa: F401


def log_decay(a, A_log, dt_bias):
    return (-torch.exp(A_log.float()) * F.softplus(a + dt_bias)).float()
