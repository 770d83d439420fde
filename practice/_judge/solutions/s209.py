"""Reference solution for 209."""
import math

import torch


def gated_attention(q, k, v, gate, o_weight):
    B, H, T, D = q.shape
    group = H // k.shape[1]
    k = k.repeat_interleave(group, dim=1)                            # (B, H, T, D): kv head h // group
    v = v.repeat_interleave(group, dim=1)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)                # (B, H, T, T)
    later = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    scores = scores.masked_fill(later, float("-inf"))                # causal
    weights = torch.softmax(scores.float(), dim=-1).to(v.dtype)
    out = (weights @ v).transpose(1, 2).reshape(B, T, H * D)         # heads side by side
    out = out * torch.sigmoid(gate)                                  # the output gate, before o_proj
    return (out @ o_weight.T).to(q.dtype)                            # (B, T, hidden)
