"""Wrong on purpose (judge --verify): the mass is summed in vocabulary order."""
import torch


def top_p_filter(logits, p):
    probs = logits.softmax(dim=-1)
    return logits.masked_fill(probs.cumsum(dim=-1) - probs >= p, float("-inf"))
