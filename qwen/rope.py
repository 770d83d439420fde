"""Rotary position embedding (RoPE), as Qwen3.5's full-attention layers use it.

Why: attention compares a query with every key by a dot product, and a dot product does not
know where the two tokens stand. RoPE tells it by rotating: split a vector into pairs of
entries, treat each pair as a point in a plane, and turn pair i of the token at position m by
the angle m * f_i. Turning a query by m * f and a key by n * f leaves their dot product
depending on (m - n) * f only, so every score sees how far apart two tokens are, not where
they are. Rotations keep lengths, so the norms that q_norm and k_norm set stay as they are.

Frequencies: f_i = theta^(-2i / rotary_dim) for i = 0 .. rotary_dim/2 - 1. The first pair turns
by one radian per token; the last one so slowly (0.8B: theta = 1e7, rotary_dim 64, a full
turn every 2 pi * 1e7^(62/64), about 38 million tokens) that it still tells positions apart
across the whole 262,144-token context.

Partial rotation: Qwen3.5 rotates only the first rotary_dim = head_dim * partial_rotary_factor
entries of each head (0.8B: 256 * 0.25 = 64) and passes the other 192 through unchanged; those
carry content with no position in them.

Layout ("rotate-half"): pair i is made of entries i and i + rotary_dim/2, not of neighbours
2i and 2i+1 (the RoPE paper's "interleaved" layout). Both are rotations; the checkpoint was
trained with rotate-half, so that is the one that reproduces it. cos and sin therefore hold
each angle twice: [angles, angles].

Multimodal RoPE: the config also names `mrope_section` and `mrope_interleaved`. For images
and video, positions have three streams (time, height, width) and the frequency pairs are
dealt out among them, interleaved (see `mrope_angles`). For text the three streams are equal,
so whichever stream a pair reads, its angle is position * f_i: plain 1-D RoPE, which is what
this module computes. `mrope_angles` is here to show (and test) that.

Precision: angles, cos and sin in fp32 (a bf16 angle at position 5000 would be off by up to
16 radians); the rotation is computed in fp32 and cast back to the input's dtype once.
"""
import torch
import torch.nn as nn


def rope_settings(cfg):
    """(rotary_dim, theta, mrope_section) from a Config's config.json (either layout).

    Reads `rope_parameters` (transformers 5 and the Hub's file) or the older top-level keys
    `rope_theta` / `partial_rotary_factor` (with `rope_scaling` holding mrope_section).
    """
    raw = getattr(cfg, "raw", None) or {}
    text = raw.get("text_config", raw)
    params = text.get("rope_parameters") or text.get("rope_scaling") or {}
    theta = float(params.get("rope_theta", text.get("rope_theta", 10000.0)))
    factor = float(params.get("partial_rotary_factor", text.get("partial_rotary_factor", 1.0)))
    rotary_dim = int(cfg.head_dim * factor)
    section = params.get("mrope_section") or [rotary_dim // 2, 0, 0]
    return rotary_dim, theta, list(section)


def inverse_frequencies(rotary_dim, theta):
    """f_i = theta^(-2i / rotary_dim), i = 0 .. rotary_dim/2 - 1, in fp32: (rotary_dim/2,).

    Computed the way the reference implementation computes them (fp32 powers), so that the
    angles agree with the ones the checkpoint was trained with to the last bit.
    """
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim
    return 1.0 / (theta ** exponents)


class RotaryEmbedding(nn.Module):
    """positions -> (cos, sin), fp32, last dimension rotary_dim (each angle twice: rotate-half).

    positions (seq,) gives (seq, rotary_dim); positions (batch, seq) gives (batch, seq, rotary_dim).
    It holds no weights (inv_freq is computed from the config, not stored in the checkpoint).
    """

    def __init__(self, cfg):
        super().__init__()
        self.rotary_dim, self.theta, self.mrope_section = rope_settings(cfg)
        self.register_buffer("inv_freq", inverse_frequencies(self.rotary_dim, self.theta),
                             persistent=False)                               # (rotary_dim/2,)

    def forward(self, positions):
        angles = positions.to(torch.float32)[..., None] * self.inv_freq     # (..., seq, rotary_dim/2)
        angles = torch.cat((angles, angles), dim=-1)                         # (..., seq, rotary_dim)
        return angles.cos(), angles.sin()

    def extra_repr(self):
        return f"rotary_dim={self.rotary_dim}, theta={self.theta:g}"


def rotate_half(x):
    """[x1, x2] -> [-x2, x1] on the last dimension: turns pair (x1_i, x2_i) by 90 degrees."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, cos, sin):
    """Rotate the first rotary_dim entries of each head of x; pass the rest through.

    x: (batch, heads, seq, head_dim); cos, sin: (seq, rotary_dim) or (batch, seq, rotary_dim).
    Pair i = (x_i, x_{i+r/2}) becomes (x_i cos - x_{i+r/2} sin, x_{i+r/2} cos + x_i sin).
    """
    r = cos.shape[-1]
    if cos.dim() == 3:                                   # (batch, seq, r) -> (batch, 1, seq, r)
        cos, sin = cos[:, None], sin[:, None]
    rot, rest = x[..., :r].float(), x[..., r:]           # (B, H, T, r), (B, H, T, head_dim - r)
    rot = rot * cos + rotate_half(rot) * sin             # fp32, broadcast over batch and heads
    return torch.cat((rot.to(x.dtype), rest), dim=-1)    # one cast; (B, H, T, head_dim)


def mrope_angles(positions_thw, inv_freq, mrope_section):
    """Interleaved multimodal RoPE: which position stream each frequency pair reads.

    positions_thw: (3, ..., seq), the time, height and width positions of each token.
    Pairs are dealt out round-robin, T H W T H W ..., for as long as each stream's share in
    mrope_section lasts (0.8B: [11, 11, 10] of the 32 pairs); the remaining pairs read T.
    Returns the angles (..., seq, rotary_dim/2). When the three streams are equal (text),
    this is positions * inv_freq exactly, the plain 1-D RoPE of RotaryEmbedding.
    """
    angles = positions_thw.to(torch.float32)[..., None] * inv_freq      # (3, ..., seq, r/2)
    out = angles[0].clone()                                              # time stream by default
    for stream in (1, 2):                                                # height, width
        take = slice(stream, 3 * mrope_section[stream], 3)
        out[..., take] = angles[stream][..., take]
    return out
