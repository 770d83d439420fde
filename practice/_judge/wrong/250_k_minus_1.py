"""Wrong on purpose (judge --verify): a range(k - 1) loop: the last draft is never compared."""
import torch


def accept_drafts(drafts, logits):
    choices = logits.argmax(-1).tolist()
    count = 0
    for j in range(len(drafts) - 1):
        if drafts[j] != choices[j]:
            break
        count += 1
    return count, int(choices[count])
