"""Equivalent form (judge --verify must pass it): softmax over the vocabulary first, then sort the
probabilities and carry the drop mask back with scatter."""
import torch


def top_p_filter(logits, p):
    probs = logits.softmax(-1)
    sp, idx = probs.sort(-1, descending=True)
    drop_sorted = (sp.cumsum(-1) - sp) >= p                                   # mass before each token
    drop = torch.zeros_like(drop_sorted).scatter(-1, idx, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))
