"""Wrong on purpose (judge --verify): the right number of pairs, but the exponent divided by head_dim."""
import torch

from practice._judge.solutions.s207 import apply_rope  # noqa: F401


def rope_frequencies(head_dim, partial_rotary_factor, theta):
    rotary_dim = int(head_dim * partial_rotary_factor)
    return 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / head_dim))
