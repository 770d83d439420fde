"""Wrong on purpose (judge --verify): computes in fp32 as the statement asks but never rounds back, so bf16
inputs give an fp32 result ("Return q's dtype" is not followed)."""
import math

import torch


def gated_attention(q, k, v, gate, o_weight):
    q, k, v, gate, o_weight = (t.float() for t in (q, k, v, gate, o_weight))
    B, H, T, D = q.shape
    group = H // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = ((q @ k.transpose(-1, -2)) / math.sqrt(D)).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, H * D)
    return (out * torch.sigmoid(gate)) @ o_weight.T
