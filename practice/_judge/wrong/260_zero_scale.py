"""Wrong on purpose (judge --verify): a row of zeros keeps the scale 0, so w / scale is NaN there."""
import torch


def quantize_int8(w):
    scale = w.abs().amax(dim=1) / 127
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


def dequantize_int8(q, scale):
    return q.float() * scale[:, None]
