"""Wrong on purpose (judge --verify): the delta transposed, A.T @ B.T = (B @ A)^T, in both functions: right
in shape only for a square W (a non-square one raises)."""
import torch


def lora_forward(x, W, A, B, alpha, r):
    return ((x @ W.T).float() + (alpha / r) * x.float() @ (A.T @ B.T).T).to(W.dtype)


def lora_merge(W, A, B, alpha, r):
    return (W.float() + (alpha / r) * (A.T @ B.T)).to(W.dtype)
