"""Wrong on purpose (judge --verify): the next token is the rejected draft."""
import torch


def accept_drafts(drafts, logits):
    choices = logits.argmax(-1).tolist()
    count = 0
    while count < len(drafts) and drafts[count] == choices[count]:
        count += 1
    return count, int(drafts[count] if count < len(drafts) else choices[count])
