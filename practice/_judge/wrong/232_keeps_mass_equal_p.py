"""Wrong on purpose (judge --verify): drops only where the mass before a token is above p, so a token whose
mass before it equals p exactly is kept too (right on every case but the exact ones)."""
import torch


def top_p_filter(logits, p):
    ordered, order = logits.sort(dim=-1, descending=True)
    probs = ordered.softmax(dim=-1)
    drop = probs.cumsum(dim=-1) - probs > p
    return torch.empty_like(logits).scatter_(-1, order, ordered.masked_fill(drop, float("-inf")))
