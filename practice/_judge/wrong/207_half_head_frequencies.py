"""Wrong on purpose (judge --verify): rotary_dim taken as head_dim / 2, ignoring partial_rotary_factor
(right only for a factor of 0.5)."""
import torch

from practice._judge.solutions.s207 import apply_rope  # noqa: F401


def rope_frequencies(head_dim, partial_rotary_factor, theta):
    rotary_dim = head_dim // 2
    return 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim))
