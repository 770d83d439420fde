"""Wrong on purpose (judge --verify): reads S q instead of S^T q."""
from practice._judge.solutions.s220 import delta_rule_step  # noqa: F401


def read_state(S, q):
    return (S @ q[..., :, None]).squeeze(-1)
