"""Wrong on purpose (judge --verify): GELU instead of silu (GeGLU, not SwiGLU)."""
import torch.nn.functional as F


def swiglu_mlp(x, gate_weight, up_weight, down_weight):
    return (F.gelu(x @ gate_weight.T) * (x @ up_weight.T)) @ down_weight.T
