"""Wrong on purpose (judge --verify): the product computed in bf16, then converted to fp32."""
import torch


def embed(ids, E):
    return E[ids]


def tied_logits(h, E):
    return (h.to(E.dtype) @ E.T).float()
