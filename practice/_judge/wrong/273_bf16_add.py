"""Wrong on purpose (judge --verify): the merge's delta rounded to W's dtype and added there (two roundings)."""
import torch


def lora_forward(x, W, A, B, alpha, r):                          # right
    return ((x @ W.T).float() + (alpha / r) * (x.float() @ A.T) @ B.T).to(W.dtype)


def lora_merge(W, A, B, alpha, r):
    delta = (alpha / r) * (B @ A)
    return W + delta.to(W.dtype)
