"""Reference solution for 271."""
import torch


def rms_norm_backward(x, weight, eps, grad_out):
    h, dy = x.float(), grad_out.float()                          # statistics in fp32
    r = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)       # (..., 1)
    g = dy * (1.0 + weight.float())                              # the scale is 1 + w
    grad_x = r * (g - h * r.pow(2) * (g * h).mean(-1, keepdim=True))   # the second term: x moves its own rms
    grad_w = (dy * h * r).reshape(-1, h.shape[-1]).sum(0)        # summed over every position
    return grad_x.to(x.dtype), grad_w.to(weight.dtype)
