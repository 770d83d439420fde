"""Wrong on purpose (judge --verify): rotate-half over the whole head (entry i paired with i + head_dim / 2),
the angles padded with cos 1, sin 0 for the pairs that do not turn, instead of over the first rotary_dim entries."""
import torch

from practice._judge.solutions.s207 import rope_frequencies  # noqa: F401


def apply_rope(x, positions, inv_freq):
    angles = positions.float()[:, None] * inv_freq                   # (seq, r / 2)
    still = x.shape[-1] // 2 - angles.shape[-1]
    cos = torch.cat((angles.cos(), torch.ones(len(positions), still)), -1)
    sin = torch.cat((angles.sin(), torch.zeros(len(positions), still)), -1)
    cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)  # (seq, head_dim)
    h = x.float()
    a, b = h.chunk(2, dim=-1)                                        # halves of the whole head
    return (h * cos + torch.cat((-b, a), dim=-1) * sin).to(x.dtype)
