"""Wrong on purpose (judge --verify): the prefill's causal mask reused for one token, not shifted by the past."""
import math

import torch


def greedy_step(k_cache, v_cache, q, k_new, v_new, out_weight):
    k = torch.cat((k_cache, k_new), dim=2)
    v = torch.cat((v_cache, v_new), dim=2)
    B, H, T, D = q.shape
    group = H // k.shape[1]
    keys, values = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = q @ keys.transpose(-1, -2) / math.sqrt(D)
    scores = scores.masked_fill(torch.ones(T, k.shape[2], dtype=torch.bool).triu(1), float("-inf"))
    out = (torch.softmax(scores, dim=-1) @ values).transpose(1, 2).reshape(B, H * D)
    return (out @ out_weight.T).argmax(-1), k, v
