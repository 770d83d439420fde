"""Wrong on purpose (judge --verify): query head h reads kv head h % kv_heads (an index, like repeat)."""
import math

import torch


def greedy_step(k_cache, v_cache, q, k_new, v_new, out_weight):
    k = torch.cat((k_cache, k_new), dim=2)
    v = torch.cat((v_cache, v_new), dim=2)
    B, H, _, D = q.shape
    kv = torch.arange(H) % k.shape[1]
    keys, values = k[:, kv], v[:, kv]
    weights = torch.softmax(q @ keys.transpose(-1, -2) / math.sqrt(D), dim=-1)
    out = (weights @ values).transpose(1, 2).reshape(B, H * D)
    return (out @ out_weight.T).argmax(-1), k, v
