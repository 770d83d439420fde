"""Wrong on purpose (judge --verify): F.cross_entropy without ignore_index=ignore_index. Its default is
-100, so only an ignore index that is a real class (the padding token's id) is scored as that class."""
import torch.nn.functional as F


def next_token_loss(logits, labels, ignore_index=-100):
    scores = logits[:, :-1].float()
    return F.cross_entropy(scores.reshape(-1, scores.shape[-1]), labels[:, 1:].reshape(-1))
