"""Wrong on purpose (judge --verify): ReLU instead of silu."""
import torch


def swiglu_mlp(x, gate_weight, up_weight, down_weight):
    return (torch.relu(x @ gate_weight.T) * (x @ up_weight.T)) @ down_weight.T
