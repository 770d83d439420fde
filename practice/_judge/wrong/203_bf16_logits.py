"""Wrong on purpose (judge --verify): multiplies in the table's dtype (bf16), no upcast."""
from practice._judge.solutions.s203 import embed  # noqa: F401  (the other function is right)


def tied_logits(h, E):
    return h.to(E.dtype) @ E.T
