"""Wrong on purpose (judge --verify): the codes truncated towards zero (.to(torch.int8) without rounding)."""
import torch


def quantize_int8(w):
    scale = w.abs().amax(dim=1) / 127
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)   # rows of zeros right: this mistake alone
    q = (w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


def dequantize_int8(q, scale):
    return q.float() * scale[:, None]
