"""Another correct solution for 270: F.cross_entropy on the shifted, flattened scores, with the
ignore index passed on (its default, -100, is right only when that is the ignore index)."""
import torch.nn.functional as F


def next_token_loss(logits, labels, ignore_index=-100):
    vocab = logits.shape[-1]
    scores = logits[:, :-1].reshape(-1, vocab).float()
    return F.cross_entropy(scores, labels[:, 1:].reshape(-1), ignore_index=ignore_index)
