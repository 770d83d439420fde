"""Wrong on purpose (judge --verify): the update scaled by alpha, not alpha / r (in both functions)."""
import torch


def lora_forward(x, W, A, B, alpha, r):
    return ((x @ W.T).float() + alpha * (x.float() @ A.T) @ B.T).to(W.dtype)


def lora_merge(W, A, B, alpha, r):
    return (W.float() + alpha * (B @ A)).to(W.dtype)
