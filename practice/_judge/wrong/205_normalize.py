"""Wrong on purpose (judge --verify): F.normalize clamps the length at eps instead."""
import torch.nn.functional as F


def l2norm(x, eps=1e-6):
    return F.normalize(x, dim=-1, eps=eps)
