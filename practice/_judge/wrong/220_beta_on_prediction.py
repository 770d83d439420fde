"""Wrong on purpose (judge --verify): beta multiplies the prediction, v - beta * k^T S, not the error."""
import torch


def delta_rule_step(S, k, v, g, beta):
    S = S * torch.exp(g)[..., None, None]
    read = (k[..., None, :] @ S).squeeze(-2)
    error = v - beta[..., None] * read
    return S + k[..., :, None] * error[..., None, :]


def read_state(S, q):
    return (q[..., None, :] @ S).squeeze(-2)
