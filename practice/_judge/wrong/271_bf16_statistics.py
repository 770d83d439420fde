"""Wrong on purpose (judge --verify): everything in the inputs' dtype (bf16 statistics for bf16 inputs)."""
import torch


def rms_norm_backward(x, weight, eps, grad_out):
    r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    g = grad_out * (1 + weight)
    grad_x = r * (g - x * r * r * (g * x).mean(-1, keepdim=True))
    grad_w = (grad_out * x * r).reshape(-1, x.shape[-1]).sum(0)
    return grad_x.to(x.dtype), grad_w.to(weight.dtype)
