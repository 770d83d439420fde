"""Wrong on purpose (judge --verify): the mixer computed as mixer_weight @ h^T and reshaped, not transposed back."""
import torch
import torch.nn.functional as F


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1 + w)


def decoder_layer(x, norm1_weight, norm2_weight, eps, mixer_weight, gate_weight, up_weight, down_weight):
    h = rms_norm(x, norm1_weight, eps)
    x = x + (mixer_weight @ h.transpose(-1, -2)).reshape(x.shape)
    h = rms_norm(x, norm2_weight, eps)
    return x + (F.silu(h @ gate_weight.T) * (h @ up_weight.T)) @ down_weight.T
