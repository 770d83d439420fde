"""Wrong on purpose (judge --verify): draft j is compared with row j + 1."""
import torch


def accept_drafts(drafts, logits):
    choices = logits.argmax(-1).tolist()
    count = 0
    while count < len(drafts) and drafts[count] == choices[count + 1]:
        count += 1
    return count, int(choices[count])
