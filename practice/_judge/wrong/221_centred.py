"""Wrong on purpose (judge --verify): 'same' padding, zeros on both sides."""
import torch.nn.functional as F


def causal_conv1d(x, weight, past=None):
    y = F.conv1d(x.transpose(1, 2), weight[:, None, :], groups=weight.shape[0], padding="same")
    return y.transpose(1, 2)
