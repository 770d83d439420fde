"""Wrong on purpose (judge --verify): the ignored positions kept out of the sum but counted in the mean."""
import torch


def next_token_loss(logits, labels, ignore_index=-100):
    scores, targets = logits[:, :-1].float(), labels[:, 1:]
    counted = targets != ignore_index
    logp = torch.log_softmax(scores, dim=-1)
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * counted).mean()
