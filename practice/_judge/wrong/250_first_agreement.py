"""Wrong on purpose (judge --verify): stops at the first agreement instead of the first disagreement."""
import torch


def accept_drafts(drafts, logits):
    choices = logits.argmax(-1).tolist()
    count = 0
    while count < len(drafts) and drafts[count] != choices[count]:
        count += 1
    return count, int(choices[count])
