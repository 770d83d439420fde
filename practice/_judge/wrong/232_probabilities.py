"""Wrong on purpose (judge --verify): the kept tokens' probabilities are returned instead of their logits."""
import torch


def top_p_filter(logits, p):
    ordered, order = logits.sort(dim=-1, descending=True)
    probs = ordered.softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs
    probs = probs.masked_fill(before >= p, 0.0)
    return torch.empty_like(logits).scatter_(-1, order, probs / probs.sum(-1, keepdim=True))
