"""Equivalent form (judge --verify must pass it): everything in fp32, rounded once to q's dtype at the end."""
import math

import torch


def gated_attention(q, k, v, gate, o_weight):
    dtype = q.dtype
    q, k, v, gate, o_weight = (t.float() for t in (q, k, v, gate, o_weight))
    B, H, T, D = q.shape
    group = H // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, H * D)
    return ((out * torch.sigmoid(gate)) @ o_weight.T).to(dtype)
