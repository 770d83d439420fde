"""Wrong on purpose (judge --verify): one scale per column (amax over dim 0) instead of per row."""
import torch


def quantize_int8(w):
    scale = w.abs().amax(dim=0) / 127                            # (in,): per column
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)   # a row of zeros: 1 (w / 0 would be NaN)
    q = torch.round(w / scale[None, :]).clamp(-127, 127).to(torch.int8)
    return q, scale


def dequantize_int8(q, scale):
    return q.float() * scale[:, None]                            # (out, in) fp32
