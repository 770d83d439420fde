"""Reference solution for 273."""
import torch


def lora_forward(x, W, A, B, alpha, r):
    y = x @ W.T                                                  # (..., out), in the base's dtype
    delta = (x.float() @ A.T) @ B.T                              # (..., r) -> (..., out), fp32
    return (y.float() + (alpha / r) * delta).to(W.dtype)


def lora_merge(W, A, B, alpha, r):
    delta = B.float() @ A.float()                                # (out, r) @ (r, in) -> (out, in)
    return (W.float() + (alpha / r) * delta).to(W.dtype)         # added in fp32, rounded once
