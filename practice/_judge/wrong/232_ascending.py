"""Wrong on purpose (judge --verify): the logits sorted ascending, least likely first."""
import torch


def top_p_filter(logits, p):
    ordered, order = logits.sort(dim=-1)
    probs = ordered.softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs                                    # mass of the tokens ahead
    ordered = ordered.masked_fill(before >= p, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, order, ordered)             # back to vocabulary order
