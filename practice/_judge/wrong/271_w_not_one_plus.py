"""Wrong on purpose (judge --verify): the gradient through w instead of the scale 1 + w."""
import torch


def rms_norm_backward(x, weight, eps, grad_out):
    h, dy = x.float(), grad_out.float()
    r = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    g = dy * weight.float()
    grad_x = r * (g - h * r.pow(2) * (g * h).mean(-1, keepdim=True))
    grad_w = (dy * h * r).reshape(-1, h.shape[-1]).sum(0)
    return grad_x.to(x.dtype), grad_w.to(weight.dtype)
