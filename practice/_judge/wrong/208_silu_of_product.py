"""Wrong on purpose (judge --verify): silu applied to the product of gate and up."""
import torch.nn.functional as F


def swiglu_mlp(x, gate_weight, up_weight, down_weight):
    return F.silu((x @ gate_weight.T) * (x @ up_weight.T)) @ down_weight.T
