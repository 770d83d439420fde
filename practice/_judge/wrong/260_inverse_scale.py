"""Wrong on purpose (judge --verify): w multiplied by 127 / amax instead of divided by the scale."""
import torch


def quantize_int8(w):
    scale = w.abs().amax(dim=1) / 127                            # (out,): each row's largest -> 127
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)   # a row of zeros: 1 (w / 0 would be NaN)
    inverse = torch.where(scale == 1, torch.ones_like(scale), 127 / w.abs().amax(dim=1))
    q = torch.round(w * inverse[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


def dequantize_int8(q, scale):
    return q.float() * scale[:, None]                            # (out, in) fp32
