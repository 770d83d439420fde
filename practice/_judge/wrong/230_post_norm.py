"""Wrong on purpose (judge --verify): Post-Norm, the norm after the residual add."""
import torch
import torch.nn.functional as F


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1 + w)


def decoder_layer(x, norm1_weight, norm2_weight, eps, mixer_weight, gate_weight, up_weight, down_weight):
    x = rms_norm(x + x @ mixer_weight.T, norm1_weight, eps)
    return rms_norm(x + (F.silu(x @ gate_weight.T) * (x @ up_weight.T)) @ down_weight.T, norm2_weight, eps)
