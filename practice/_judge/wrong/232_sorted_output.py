"""Wrong on purpose (judge --verify): the filtered logits are returned in sorted order."""
import torch


def top_p_filter(logits, p):
    ordered, _ = logits.sort(dim=-1, descending=True)
    probs = ordered.softmax(dim=-1)
    return ordered.masked_fill(probs.cumsum(dim=-1) - probs >= p, float("-inf"))
