"""Wrong on purpose (judge --verify): grad_x without the term through the rms (x moves its own rms)."""
import torch


def rms_norm_backward(x, weight, eps, grad_out):
    h, dy = x.float(), grad_out.float()
    r = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    grad_x = r * dy * (1.0 + weight.float())
    grad_w = (dy * h * r).reshape(-1, h.shape[-1]).sum(0)
    return grad_x.to(x.dtype), grad_w.to(weight.dtype)
