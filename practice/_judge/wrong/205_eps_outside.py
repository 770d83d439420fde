"""Wrong on purpose (judge --verify): adds eps to the length instead of to the sum."""


def l2norm(x, eps=1e-6):
    return x / ((x * x).sum(-1, keepdim=True).sqrt() + eps)
