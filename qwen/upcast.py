"""A faster bf16 prompt pass: the projections of a long prompt computed in fp32 (issue 24).

Why: on a CPU without native bf16 (AVX2, no AVX-512 BF16 / AMX), torch's bf16 matmul converts
every product to fp32 and runs far below its fp32 matmul (bench/bench_model.py measures it: a
512-token prompt of the bf16 model took 6.5x its fp32 time). For many rows at once it pays to
convert the weight to fp32 first (once per call: a 3584 x 1024 weight is 3.7 M values, a few ms)
and run the fp32 matmul; the result is rounded to bf16 once, as bf16's own matmul does (it
accumulates in fp32 too), so the numbers agree to a bf16 rounding step. Decoding (one row) keeps
the bf16 matmul: there the time goes into reading the weight, and bf16 reads half the bytes.

The plain path stays the modules' own `nn.Linear`; `upcast_prompts(model)` wraps them, and
tests/test_upcast.py checks the wrapped model against the plain one.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

MIN_ROWS = 32                                 # rows (tokens) from which a bf16 projection runs in fp32


class UpcastLinear(nn.Module):
    """An nn.Linear whose bf16 matmul runs in fp32 for `min_rows` rows or more."""

    def __init__(self, linear, min_rows=MIN_ROWS):
        super().__init__()
        self.linear, self.min_rows = linear, min_rows

    @property
    def weight(self):                                                    # what the modules read (its dtype)
        return self.linear.weight

    in_features = property(lambda self: self.linear.in_features)
    out_features = property(lambda self: self.linear.out_features)

    def forward(self, x):
        if x.numel() < self.min_rows * x.shape[-1]:
            return self.linear(x)                                        # few rows: bf16 reads half the bytes
        return F.linear(x.float(), self.linear.weight.float()).to(x.dtype)   # (..., out), rounded once


def upcast_prompts(model, min_rows=MIN_ROWS):
    """Wrap every nn.Linear of the decoder layers (in place); returns the model. A no-op for an fp32 model."""
    for module in list(model.layers.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Linear) and child.weight.dtype != torch.float32:
                setattr(module, name, UpcastLinear(child, min_rows))
    return model

