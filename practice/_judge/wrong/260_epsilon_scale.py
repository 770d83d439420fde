"""Wrong on purpose (judge --verify): max |w| clamped to an epsilon, so a row of zeros gets a tiny scale
(about 8e-15) instead of 1; its codes are right (0), the scale is not the one asked for."""
import torch


def quantize_int8(w):
    scale = w.abs().amax(dim=1).clamp_min(1e-12) / 127
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


def dequantize_int8(q, scale):
    return q.float() * scale[:, None]
