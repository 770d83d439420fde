"""Wrong on purpose (judge --verify): sigmoid(gate) instead of silu(gate) = gate * sigmoid(gate)."""
import torch


def swiglu_mlp(x, gate_weight, up_weight, down_weight):
    return (torch.sigmoid(x @ gate_weight.T) * (x @ up_weight.T)) @ down_weight.T
