"""Wrong on purpose (judge --verify): the filter runs along dimension 1, right only for 2-D logits."""
import torch


def top_p_filter(logits, p):
    ordered, order = logits.sort(dim=1, descending=True)
    probs = ordered.softmax(dim=1)
    before = probs.cumsum(dim=1) - probs
    ordered = ordered.masked_fill(before >= p, float("-inf"))
    return torch.empty_like(logits).scatter_(1, order, ordered)
