"""Wrong on purpose (judge --verify): the stream itself is replaced by its normalized version."""
import torch
import torch.nn.functional as F


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1 + w)


def decoder_layer(x, norm1_weight, norm2_weight, eps, mixer_weight, gate_weight, up_weight, down_weight):
    x = rms_norm(x, norm1_weight, eps)
    x = x + x @ mixer_weight.T
    x = rms_norm(x, norm2_weight, eps)
    return x + (F.silu(x @ gate_weight.T) * (x @ up_weight.T)) @ down_weight.T
