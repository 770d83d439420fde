"""Reference solution for 207."""
import torch


def rope_frequencies(head_dim, partial_rotary_factor, theta):
    rotary_dim = int(head_dim * partial_rotary_factor)
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim
    return 1.0 / (theta ** exponents)                                # (rotary_dim / 2,)


def apply_rope(x, positions, inv_freq):
    angles = positions.float()[:, None] * inv_freq                   # (seq, rotary_dim / 2)
    angles = torch.cat((angles, angles), dim=-1)                     # each angle twice: rotate-half
    cos, sin = angles.cos(), angles.sin()
    r = angles.shape[-1]
    rot = x[..., :r].float()
    a, b = rot.chunk(2, dim=-1)
    rot = rot * cos + torch.cat((-b, a), dim=-1) * sin               # (a cos - b sin, b cos + a sin)
    return torch.cat((rot.to(x.dtype), x[..., r:]), dim=-1)
