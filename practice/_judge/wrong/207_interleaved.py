"""Wrong on purpose (judge --verify): pairs neighbours (2i, 2i + 1), the RoPE paper's layout, not the checkpoint's."""
import torch

from practice._judge.solutions.s207 import rope_frequencies  # noqa: F401


def apply_rope(x, positions, inv_freq):
    angles = positions.float()[:, None] * inv_freq                   # (seq, r / 2)
    cos, sin = angles.cos(), angles.sin()
    r = 2 * inv_freq.shape[0]
    pairs = x[..., :r].float().unflatten(-1, (r // 2, 2))
    a, b = pairs[..., 0], pairs[..., 1]
    rot = torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(-2)
    return torch.cat((rot.to(x.dtype), x[..., r:]), dim=-1)
