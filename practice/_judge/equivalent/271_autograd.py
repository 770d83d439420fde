"""Another correct solution for 271: the forward in fp32, differentiated by autograd."""
import torch


def rms_norm_backward(x, weight, eps, grad_out):
    h = x.detach().float().requires_grad_(True)
    w = weight.detach().float().requires_grad_(True)
    y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * (1 + w)
    grad_x, grad_w = torch.autograd.grad(y, (h, w), grad_out.float())
    return grad_x.to(x.dtype), grad_w.to(weight.dtype)
