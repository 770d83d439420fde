"""Wrong on purpose (judge --verify): the rotation done in x's dtype (bf16), cos and sin cast to it."""
import torch


def rope_frequencies(head_dim, partial_rotary_factor, theta):
    rotary_dim = int(head_dim * partial_rotary_factor)
    return 1.0 / theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim)


def apply_rope(x, positions, inv_freq):
    angles = positions.float()[:, None] * inv_freq
    angles = torch.cat((angles, angles), dim=-1)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    r = cos.shape[-1]
    x1, x2 = x[..., :r].chunk(2, dim=-1)
    return torch.cat((x[..., :r] * cos + torch.cat((-x2, x1), dim=-1) * sin, x[..., r:]), dim=-1)
