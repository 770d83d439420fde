"""Another correct solution for 260: clamp, then round. With whole-number bounds the order does
not matter (a value past 127 becomes 127 either way), so this passes too."""
import torch


def quantize_int8(w):
    scale = w.abs().amax(dim=1, keepdim=True) / 127              # (out, 1)
    scale[scale == 0] = 1                                        # rows of zeros
    q = torch.round((w / scale).clamp(-127, 127)).to(torch.int8)
    return q, scale[:, 0]


def dequantize_int8(q, scale):
    return q.to(torch.float32) * scale.unsqueeze(1)
