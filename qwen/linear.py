"""The one matrix product every projection of the model computes: y = x W^T (+ b).

Why a file of its own: it is the single place where "how a product is computed" can change
without changing what it computes. The lesson computes it with F.linear. The engine (engine/
products.py) may install a faster kernel for the few-row products of decoding, through `kernel`,
the one declared seam: the model's code and its state dict stay the same on every path, and
tests check the two paths give the same numbers (to fp32 rounding).

    with kernel(fast):          # fast(x, weight, bias) -> x @ weight.T + bias, or None to decline
        model(ids)
"""
import contextlib

import torch.nn as nn
import torch.nn.functional as F

_kernels = []                                  # the kernels installed, innermost last


def product(x, weight, bias=None):
    """x (..., in) @ weight (out, in)^T + bias -> (..., out): by the innermost installed kernel that
    takes the call, else F.linear."""
    for fast in reversed(_kernels):
        y = fast(x, weight, bias)
        if y is not None:
            return y
    return F.linear(x, weight, bias)


@contextlib.contextmanager
def kernel(fast):
    """While active, products go to fast(x, weight, bias) first (it returns None for calls it declines)."""
    _kernels.append(fast)
    try:
        yield fast
    finally:
        _kernels.remove(fast)


class Linear(nn.Linear):
    """nn.Linear whose product goes through `product`: the same weight and bias, the same state dict keys."""

    def forward(self, x):
        return product(x, self.weight, self.bias)
