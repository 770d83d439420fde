"""Wrong on purpose (judge --verify): one scale for the whole tensor instead of one per row."""
import torch


def quantize_int8(w):
    scale = (w.abs().max() / 127).expand(w.shape[0]).clone()
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


def dequantize_int8(q, scale):
    return q.float() * scale[:, None]
