"""Wrong on purpose (judge --verify): the gate applied after o_proj instead of before it."""
import math

import torch


def gated_attention(q, k, v, gate, o_weight):
    B, H, T, D = q.shape
    group = H // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = ((q @ k.transpose(-1, -2)) / math.sqrt(D)).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, H * D)
    return (out @ o_weight.T) * torch.sigmoid(gate)
