"""Wrong on purpose (judge --verify): multiplies S by the log decay g itself, not by exp(g)."""
from practice._judge.solutions.s220 import read_state  # noqa: F401


def delta_rule_step(S, k, v, g, beta):
    S = S * g[..., None, None]
    error = beta[..., None] * (v - (k[..., None, :] @ S).squeeze(-2))
    return S + k[..., :, None] * error[..., None, :]
