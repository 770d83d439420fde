"""Wrong on purpose (judge --verify): no causal mask, so every token also reads the tokens after it."""
import math

import torch


def gated_attention(q, k, v, gate, o_weight):
    B, H, T, D = q.shape
    group = H // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    weights = torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(D), dim=-1)
    out = (weights @ v).transpose(1, 2).reshape(B, T, H * D)
    return (out * torch.sigmoid(gate)) @ o_weight.T
