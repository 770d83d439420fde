"""The three normalizations of Qwen3.5: zero-centred RMSNorm, gated RMSNorm, and l2norm.

Why normalize: every layer adds its output to the residual stream, so the stream's scale
would drift from layer to layer. RMSNorm rescales each vector to a root mean square of 1
before a sublayer reads it, then applies a learned per-dimension scale. Unlike LayerNorm it
does not subtract the mean and has no bias (the textbook LayerNorm takes two reductions, mean
then variance; RMSNorm one, the mean of squares).

Why "zero-centred": the file stores `w` and the norm multiplies by the scale `1 + w`. A fresh
layer holds zeros (scale 1); weight decay pulls w towards 0, that is the scale towards 1, not
towards 0; and small learned changes survive bf16 storage: just above 1.0 the gap between bf16
numbers is 2^-7 = 0.0078, next to 0 it is far finer. Gemma does the same.

Precision: statistics are computed in fp32 whatever the input dtype, and the result is cast
back to the input dtype once, at the end, after the weight (LLaMA casts before the weight). l2norm is the exception: it runs in the dtype it is
given, as in the model, which only ever calls it on fp32 tensors.

Values are not checked (that would cost a pass over the data). A NaN anywhere in a vector
makes that whole vector NaN; an inf makes its RMS inf, so the vector's finite entries come out
0 and its inf entries NaN; so do entries above about 1.8e19 in size, whose fp32 squares overflow.
Other vectors are unaffected. An all-zero vector gives zeros (eps keeps the root above 0).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F



class ShapeError(ValueError):
    """A wrong input shape. Carries the message in English and Chinese (`en`, `zh`); str() is the
    English one, and engine.cli prints the learner's language. (This module depends on torch only.)"""

    def __init__(self, en, zh):
        self.en, self.zh = en, zh
        super().__init__(en)


class RMSNorm(nn.Module):
    """y = x / rms(x) * (1 + w): the file stores w (zero-centred), the scale applied is 1 + w."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))                   # w: 0 at init, scale 1 + w

    def forward(self, x):
        _check_last_dim(self, x)
        h = x.float()                                                  # statistics in fp32
        inv_rms = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)   # (..., 1)
        return (h * inv_rms * (1.0 + self.weight.float())).to(x.dtype)      # one cast, at the end

    def extra_repr(self):
        return f"{self.weight.shape[0]}, eps={self.eps}"


class GatedRMSNorm(nn.Module):
    """y = x / rms(x) * w * silu(gate): linear attention's output norm, gate = in_proj_z(x).

    Here the stored w is the scale itself (1 at init, not 1 + w)."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))                    # not zero-centred

    def forward(self, x, gate):
        _check_gate(self, x, gate)
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight.float() * h * F.silu(gate.float())).to(x.dtype)

    def extra_repr(self):
        return f"{self.weight.shape[0]}, eps={self.eps}"


def l2norm(x, dim=-1, eps=1e-6):
    """x / sqrt(sum(x^2) + eps): unit length along dim. eps is added to the sum, inside the root."""
    return x * torch.rsqrt((x * x).sum(dim, keepdim=True) + eps)


# Bad input: this module's checks, in one place, so that the forward paths read as the math.

def _check_last_dim(norm, x):
    if x.shape[-1:] != norm.weight.shape:
        name, d, shape, got = type(norm).__name__, norm.weight.shape[0], list(x.shape), x.shape[-1] if x.dim() else "-"
        raise ShapeError(f"{name}({d}) normalizes vectors of length {d}, but the input has shape {shape} "
                         f"(last dimension {got}).",
                         f"{name}({d}) 归一化长度为 {d} 的向量，但输入的形状是 {shape}（最后一维是 {got}）。")


def _check_gate(norm, x, gate):
    _check_last_dim(norm, x)
    if gate.shape != x.shape:
        g, s = list(gate.shape), list(x.shape)
        raise ShapeError(f"GatedRMSNorm: the gate has shape {g} but x has shape {s}; they must match "
                         "(one gate value per element).",
                         f"GatedRMSNorm：门的形状是 {g}，x 的形状是 {s}；两者必须相同（每个元素一个门值）。")
