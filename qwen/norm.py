"""The three normalizations of Qwen3.5: zero-centred RMSNorm, gated RMSNorm, and l2norm.

Why normalize: every layer adds its output to the residual stream, so the stream's scale
would drift from layer to layer. RMSNorm rescales each vector to a root mean square of 1
before a sublayer reads it, then applies a learned per-dimension scale. Unlike LayerNorm it
does not subtract the mean and has no bias: one reduction instead of two.

Why "zero-centred": Qwen3.5 stores the scale as w - 1 and applies 1 + w. A fresh layer then
holds zeros ("scale 1"), and small learned changes survive bf16 storage: next to 1.0 the
gap between bf16 numbers is 2^-7 = 0.0078, next to 0 it is far finer.

Precision: statistics are computed in fp32 whatever the input dtype, and the result is cast
back to the input dtype once, at the end. l2norm is the exception: it runs in the dtype it is
given, as in the model, which only ever calls it on fp32 tensors.

Values are not checked (that would cost a pass over the data). A NaN anywhere in a vector
makes that whole vector NaN; an inf makes its RMS inf, so the vector's finite entries come out
0 and its inf entries NaN; so do entries above about 1.8e19 in size, whose fp32 squares overflow.
Other vectors are unaffected. An all-zero vector gives zeros (eps keeps the root above 0).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from qwen.lang import QwenError


class RMSNorm(nn.Module):
    """y = x / rms(x) * (1 + w); w is stored zero-centred (0 means a scale of 1)."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))                   # w - 1, zeros at init

    def forward(self, x):
        _check_last_dim(self, x)
        h = x.float()                                                  # statistics in fp32
        inv_rms = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)   # (..., 1)
        return (h * inv_rms * (1.0 + self.weight.float())).to(x.dtype)      # one cast, at the end

    def extra_repr(self):
        return f"{self.weight.shape[0]}, eps={self.eps}"


class GatedRMSNorm(nn.Module):
    """y = x / rms(x) * w * silu(gate): linear attention's output norm. w is a plain scale (1 at init)."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))                    # not zero-centred

    def forward(self, x, gate):
        _check_last_dim(self, x)
        if gate.shape != x.shape:
            raise QwenError("GatedRMSNorm: the gate has shape {g} but x has shape {x}; they must match "
                            "(one gate value per element).",
                            "GatedRMSNorm：门的形状是 {g}，x 的形状是 {x}；两者必须相同（每个元素一个门值）。",
                            g=list(gate.shape), x=list(x.shape))
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight.float() * h * F.silu(gate.float())).to(x.dtype)

    def extra_repr(self):
        return f"{self.weight.shape[0]}, eps={self.eps}"


def l2norm(x, dim=-1, eps=1e-6):
    """x / sqrt(sum(x^2) + eps): unit length along dim. eps is added to the sum, inside the root."""
    return x * torch.rsqrt((x * x).sum(dim, keepdim=True) + eps)


def _check_last_dim(norm, x):
    if x.shape[-1:] != norm.weight.shape:
        raise QwenError("{name}({d}) normalizes vectors of length {d}, but the input has shape {shape} "
                        "(last dimension {got}).",
                        "{name}({d}) 归一化长度为 {d} 的向量，但输入的形状是 {shape}（最后一维是 {got}）。",
                        name=type(norm).__name__, d=norm.weight.shape[0], shape=list(x.shape),
                        got=x.shape[-1] if x.dim() else "-")
