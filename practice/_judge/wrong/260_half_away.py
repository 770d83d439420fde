"""Wrong on purpose (judge --verify): halves rounded away from zero (2.5 -> 3) instead of to even."""
import torch


def quantize_int8(w):
    scale = w.abs().amax(dim=1) / 127                            # (out,): each row's largest -> 127
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)   # a row of zeros: 1 (w / 0 would be NaN)
    x = w / scale[:, None]
    q = (torch.sign(x) * torch.floor(x.abs() + 0.5)).clamp(-127, 127).to(torch.int8)
    return q, scale


def dequantize_int8(q, scale):
    return q.float() * scale[:, None]                            # (out, in) fp32
