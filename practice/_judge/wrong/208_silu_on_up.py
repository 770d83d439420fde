"""Wrong on purpose (judge --verify): silu on the up projection, the gate left linear."""
import torch.nn.functional as F


def swiglu_mlp(x, gate_weight, up_weight, down_weight):
    return (F.silu(x @ up_weight.T) * (x @ gate_weight.T)) @ down_weight.T
