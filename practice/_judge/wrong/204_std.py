"""Wrong on purpose (judge --verify): divides by the standard deviation instead of the RMS."""
from practice._judge.solutions.s204 import gated_rms_norm  # noqa: F401


def rms_norm(x, weight, eps=1e-6):
    h = x.float()
    return (h / (h.std(-1, keepdim=True) + eps) * (1 + weight.float())).to(x.dtype)
