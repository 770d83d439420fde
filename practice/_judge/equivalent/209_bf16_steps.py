"""Equivalent form (judge --verify must pass it): scores in q's dtype, only the softmax in fp32 (its
weights rounded back), @ v, the gate and o_proj in q's dtype: several roundings, each within the tolerance."""
import math

import torch


def gated_attention(q, k, v, gate, o_weight):
    B, H, T, D = q.shape
    group = H // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = (q / math.sqrt(D)) @ k.transpose(-1, -2)               # scaled before the product
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    out = (weights @ v).transpose(1, 2).reshape(B, T, H * D)
    return (out * torch.sigmoid(gate)) @ o_weight.T
