"""Wrong on purpose (judge --verify): keeps only tokens whose running sum stays within p."""
import torch


def top_p_filter(logits, p):
    ordered, order = logits.sort(dim=-1, descending=True)
    keep = ordered.softmax(dim=-1).cumsum(dim=-1) <= p
    return torch.empty_like(logits).scatter_(-1, order, ordered.masked_fill(~keep, float("-inf")))
