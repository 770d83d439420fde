"""Wrong on purpose (judge --verify): counts tensors instead of parameters."""
from practice._judge.solutions import s202


def count_parameters(header, layer_types):
    ones = {n: {**e, "shape": [1]} for n, e in header.items()}
    return s202.count_parameters(ones, layer_types)
