"""Wrong on purpose (judge --verify): the query attends the new token only."""
import math

import torch


def greedy_step(k_cache, v_cache, q, k_new, v_new, out_weight):
    k = torch.cat((k_cache, k_new), dim=2)                                    # the cache grows by one position
    v = torch.cat((v_cache, v_new), dim=2)
    B, H, _, D = q.shape
    group = H // k.shape[1]
    keys, values = k_new.repeat_interleave(group, 1), v_new.repeat_interleave(group, 1)   # the new token only
    weights = torch.softmax(q @ keys.transpose(-1, -2) / math.sqrt(D), dim=-1)   # the last position sees all keys
    out = (weights @ values).transpose(1, 2).reshape(B, H * D)
    return (out @ out_weight.T).argmax(-1), k, v
