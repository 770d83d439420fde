"""Wrong on purpose (judge --verify): the count is incremented before the check, so a disagreement gives (count + 1, choices[count + 1])."""
import torch


def accept_drafts(drafts, logits):
    choices = logits.argmax(-1).tolist()
    count = 0
    for j in range(len(drafts)):
        count += 1                                           # before the check
        if drafts[j] != choices[j]:
            break
    return count, int(choices[count])
