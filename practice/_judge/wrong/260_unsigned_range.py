"""Wrong on purpose (judge --verify): divides by 255, an unsigned byte's span, for the signed range -127..127."""
import torch


def quantize_int8(w):
    scale = w.abs().amax(dim=1) / 255
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)   # rows of zeros right: this mistake alone
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


def dequantize_int8(q, scale):
    return q.float() * scale[:, None]
