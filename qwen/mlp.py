"""The feed-forward block of every Qwen3.5 layer: a SwiGLU MLP.

Why: attention moves information between tokens; the MLP then works on each token alone,
and holds most of the model's parameters. A plain MLP is down(act(up(x))). SwiGLU (Shazeer,
2020, "GLU Variants Improve Transformer") uses two projections of the same input instead:

    down( silu(gate(x)) * up(x) )        silu(z) = z * sigmoid(z)

gate(x) decides, per hidden unit, how much of up(x) passes: silu is about 0 for negative z
and about z for large z, so each unit is switched off or on (smoothly) by the token itself.
For the same width this costs three matrices instead of two; the SwiGLU paper kept a plain
MLP's parameter count by making the hidden layer 8/3 as wide instead of 4x. Qwen3.5 narrows it
less (0.8B: 1024 -> 3584 -> 1024, 3.5x): 3 x 3.5 = 10.5 x hidden^2 per layer against 2 x 4 = 8.

Precision: the three matmuls and silu run in the weights' dtype: bf16 for a layer loaded as
stored (chapter 5's), fp32 in the model `load_model` builds (its default converts every weight to
fp32: on many CPUs fp32 matmuls are the faster ones, chapter 5 measures it). torch evaluates a
bf16 silu in fp32 internally and rounds once. The input is cast to the weights' dtype first and
the result cast back to the input's dtype once, at the end. No bias anywhere.
"""
import torch.nn as nn
import torch.nn.functional as F
from qwen.linear import Linear


class MLP(nn.Module):
    """x (..., hidden) -> down(silu(gate(x)) * up(x)) (..., hidden)."""

    def __init__(self, hidden_size, intermediate_size):
        super().__init__()
        self.gate_proj = Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x):
        h = x.to(getattr(self.gate_proj, "weight", x).dtype)    # matmuls in the weights' dtype (quantized: x's)
        h = F.silu(self.gate_proj(h)) * self.up_proj(h)          # (..., intermediate)
        return self.down_proj(h).to(x.dtype)                     # (..., hidden)
