"""Wrong on purpose (judge --verify): position t's logits scored against label t (no shift)."""
import torch


def next_token_loss(logits, labels, ignore_index=-100):
    scores = logits.float()
    counted = labels != ignore_index
    logp = torch.log_softmax(scores, dim=-1)
    picked = logp.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * counted).sum() / counted.sum()
