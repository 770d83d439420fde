"""Wrong on purpose (judge --verify): counts the model's own next token as an accepted draft."""
import torch


def accept_drafts(drafts, logits):
    choices = logits.argmax(-1).tolist()
    count = 0
    while count < len(drafts) and drafts[count] == choices[count]:
        count += 1
    return count + 1, int(choices[count])
