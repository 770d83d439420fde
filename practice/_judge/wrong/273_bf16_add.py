"""Wrong on purpose (judge --verify): the merge's delta rounded to W's dtype and added there (two roundings)."""
import torch

from practice._judge.solutions.s273 import lora_forward  # noqa: F401


def lora_merge(W, A, B, alpha, r):
    delta = (alpha / r) * (B @ A)
    return W + delta.to(W.dtype)
