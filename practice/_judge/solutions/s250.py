"""Reference solution for 250."""
import torch


def accept_drafts(drafts, logits):
    choices = logits.argmax(-1).tolist()                     # the model's greedy token after each prefix
    count = 0
    while count < len(drafts) and drafts[count] == choices[count]:
        count += 1                                           # kept while they agree
    return count, int(choices[count])                        # the model's own next token
