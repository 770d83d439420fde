"""Wrong on purpose (judge --verify): ignores partial_rotary_factor, so all head_dim entries get frequencies."""
import torch

from practice._judge.solutions.s207 import apply_rope  # noqa: F401


def rope_frequencies(head_dim, partial_rotary_factor, theta):
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim
    return 1.0 / (theta ** exponents)
