"""Wrong on purpose (judge --verify): every agreeing draft is counted, not only the leading run."""
import torch


def accept_drafts(drafts, logits):
    choices = logits.argmax(-1).tolist()
    count = sum(1 for d, c in zip(drafts, choices) if d == c)
    return count, int(choices[count])
