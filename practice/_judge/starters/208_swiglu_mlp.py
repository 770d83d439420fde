"""Exercise 208 · The SwiGLU MLP (easy; needs PyTorch)

swiglu_mlp(x, gate_weight, up_weight, down_weight): Qwen3.5's feed-forward block,
  down( silu(gate(x)) * up(x) ),   silu(z) = z * sigmoid(z)
where gate(x) = x @ gate_weight.T (no bias), and likewise up and down. Shapes: x (..., hidden),
gate_weight and up_weight (intermediate, hidden), down_weight (hidden, intermediate); the result
has x's shape and dtype. x and the weights share a dtype; compute in it, as the model does
(F.linear or @, F.silu), or in fp32 with one rounding at the end: both pass.
Changing an input in place is allowed (the judge keeps its own copy).

Checked: fp32 results within atol=1e-5, rtol=1e-4 (matmuls may sum in any order); the bf16 case
(the model's own layer-0 weights) within 2% of the output's largest value, so bf16 matmuls and
fp32-then-round both pass, and the known mistakes (silu on the wrong projection, sigmoid, ReLU
or GELU for silu) do not.

练习 208 · SwiGLU MLP（简单；需要 PyTorch）

swiglu_mlp(x, gate_weight, up_weight, down_weight)：Qwen3.5 的前馈网络，
  down( silu(gate(x)) * up(x) )，silu(z) = z * sigmoid(z)
其中 gate(x) = x @ gate_weight.T（没有偏置），up 和 down 同理。形状：x 为 (..., hidden)，
gate_weight 和 up_weight 为 (intermediate, hidden)，down_weight 为 (hidden, intermediate)；结果的形状
和类型与 x 相同。x 和权重的类型相同；像模型那样就在这个类型中计算（F.linear 或 @、F.silu），
或者在 fp32 中计算、最后舍入一次：两种都能通过。可以原地修改输入（评测器保留了自己的副本）。

检查方式：fp32 结果在 atol=1e-5、rtol=1e-4 以内（矩阵乘法的求和顺序不限）；bf16 用例（模型自己的
第 0 层权重）与期望值的差不超过输出最大值的 2%，所以 bf16 矩阵乘法和“fp32 计算后舍入”都能通过，
而已知的错误（silu 用在错误的投影上、用 sigmoid、ReLU 或 GELU 代替 silu）都通不过。

Check: python practice/judge.py 208
"""
import torch
import torch.nn.functional as F


def swiglu_mlp(x, gate_weight, up_weight, down_weight):
    raise NotImplementedError
