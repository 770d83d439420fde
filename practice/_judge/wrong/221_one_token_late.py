"""Wrong on purpose (judge --verify): kernel zeros on the left instead of kernel-1, the output cut to seq
(F.conv1d's padding=kernel), so each window ends at the token before."""
import torch
import torch.nn.functional as F


def causal_conv1d(x, weight, past=None):
    B, T, C = x.shape
    K = weight.shape[-1]
    if past is not None:
        xp = torch.cat([past.to(x.dtype), x], 1)
        return sum(weight[:, j] * xp[:, j:j + T] for j in range(K))
    y = F.conv1d(x.transpose(1, 2), weight[:, None].to(x.dtype), padding=K, groups=C)   # (B, C, T + K + 1)
    return y[..., :T].transpose(1, 2)
