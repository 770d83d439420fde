"""Wrong on purpose (judge --verify): kv heads repeated as a block (0, 1, 0, 1, ...), not each one in turn."""
import math

import torch


def gated_attention(q, k, v, gate, o_weight):
    B, H, T, D = q.shape
    group = H // k.shape[1]
    k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
    scores = ((q @ k.transpose(-1, -2)) / math.sqrt(D)).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, H * D)
    return (out * torch.sigmoid(gate)) @ o_weight.T
