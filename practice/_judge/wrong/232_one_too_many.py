"""Wrong on purpose (judge --verify): the mask 'before >= p' shifted right by one, so one token past the crossing is kept."""
import torch


def top_p_filter(logits, p):
    ordered, order = logits.sort(dim=-1, descending=True)
    probs = ordered.softmax(dim=-1)
    drop = probs.cumsum(dim=-1) - probs >= p
    drop = torch.cat((torch.zeros_like(drop[..., :1]), drop[..., :-1]), dim=-1)
    return torch.empty_like(logits).scatter_(-1, order, ordered.masked_fill(drop, float("-inf")))
