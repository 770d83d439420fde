"""Equivalent form (judge --verify must pass it): each pair as a complex number, turned by e^(i angle)."""
import torch


def rope_frequencies(head_dim, partial_rotary_factor, theta):
    rotary_dim = int(head_dim * partial_rotary_factor)
    return torch.tensor(float(theta)) ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim)


def apply_rope(x, positions, inv_freq):
    half = inv_freq.shape[0]
    h = x.float()
    z = torch.complex(h[..., :half], h[..., half:2 * half])          # pair i: entries i and i + half
    turn = torch.polar(torch.ones(len(positions), half), positions.float()[:, None] * inv_freq)
    z = z * turn
    return torch.cat((z.real, z.imag, h[..., 2 * half:]), dim=-1).to(x.dtype)
