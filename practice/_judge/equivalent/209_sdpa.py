"""Equivalent form (judge --verify must pass it): F.scaled_dot_product_attention with GQA built in."""
import torch
import torch.nn.functional as F


def gated_attention(q, k, v, gate, o_weight):
    B, H, T, D = q.shape
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return (out.transpose(1, 2).reshape(B, T, H * D) * torch.sigmoid(gate)) @ o_weight.T
