"""Wrong on purpose (judge --verify): converts the looked-up rows to fp32."""
from practice._judge.solutions.s203 import tied_logits  # noqa: F401


def embed(ids, E):
    return E[ids].float()
