"""Wrong on purpose (judge --verify): the softmax over the query axis (dim=-2)."""
import math

import torch


def greedy_step(k_cache, v_cache, q, k_new, v_new, out_weight):
    k = torch.cat((k_cache, k_new), dim=2)                                    # the cache grows by one position
    v = torch.cat((v_cache, v_new), dim=2)
    B, H, _, D = q.shape
    group = H // k.shape[1]
    keys, values = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    weights = torch.softmax(q @ keys.transpose(-1, -2) / math.sqrt(D), dim=-2)   # the last position sees all keys
    out = (weights @ values).transpose(1, 2).reshape(B, H * D)
    return (out @ out_weight.T).argmax(-1), k, v
