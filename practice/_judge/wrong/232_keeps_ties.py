"""Wrong on purpose (judge --verify): a threshold at the cut's logit keeps every token tied with it."""
import torch


def top_p_filter(logits, p):
    ordered, order = logits.sort(dim=-1, descending=True)
    probs = ordered.softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs
    cut = ordered.masked_fill(before >= p, float("inf")).min(-1, keepdim=True).values   # the smallest kept logit
    return logits.masked_fill(logits < cut, float("-inf"))
