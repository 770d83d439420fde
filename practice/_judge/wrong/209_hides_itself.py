"""Wrong on purpose (judge --verify): the mask covers the diagonal too (triu(0)), so a token cannot read
itself and the first one reads nothing (a row of -inf: NaN)."""
import math

import torch


def gated_attention(q, k, v, gate, o_weight):
    B, H, T, D = q.shape
    group = H // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = ((q @ k.transpose(-1, -2)) / math.sqrt(D)).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(0), float("-inf"))
    out = (torch.softmax(scores.float(), dim=-1).to(v.dtype) @ v).transpose(1, 2).reshape(B, T, H * D)
    return ((out * torch.sigmoid(gate)) @ o_weight.T).to(q.dtype)
