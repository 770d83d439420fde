"""Wrong on purpose (judge --verify): divides by 255, an unsigned byte's span, for the signed range -127..127."""
import torch


def quantize_int8(w):
    scale = w.abs().amax(dim=1) / 255
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


def dequantize_int8(q, scale):
    return q.float() * scale[:, None]
