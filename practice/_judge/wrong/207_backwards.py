"""Wrong on purpose (judge --verify): rotate_half with the sign on the wrong half: turns by minus the angle."""
import torch

from practice._judge.solutions.s207 import rope_frequencies  # noqa: F401


def apply_rope(x, positions, inv_freq):
    angles = positions.float()[:, None] * inv_freq
    angles = torch.cat((angles, angles), dim=-1)
    r = angles.shape[-1]
    rot = x[..., :r].float()
    a, b = rot.chunk(2, dim=-1)
    rot = rot * angles.cos() + torch.cat((b, -a), dim=-1) * angles.sin()
    return torch.cat((rot.to(x.dtype), x[..., r:]), dim=-1)
