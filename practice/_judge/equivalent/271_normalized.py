"""Another correct solution for 271, in terms of the normalized x_hat = x * r:
grad_x = r * (g - x_hat * mean(g * x_hat)), the same formula with r^2 x folded into x_hat."""
import torch


def rms_norm_backward(x, weight, eps, grad_out):
    h, dy = x.float(), grad_out.float()
    r = 1 / torch.sqrt((h * h).mean(-1, keepdim=True) + eps)
    x_hat = h * r
    g = dy * (weight.float() + 1)
    grad_x = r * (g - x_hat * (g * x_hat).mean(-1, keepdim=True))
    grad_w = (dy * x_hat).flatten(0, -2).sum(0)
    return grad_x.to(x.dtype), grad_w.to(weight.dtype)
