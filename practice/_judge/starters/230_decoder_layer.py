"""Exercise 230 · A decoder layer's residual wiring (easy; needs PyTorch)

decoder_layer(x, norm1_weight, norm2_weight, eps, mixer_weight, gate_weight, up_weight, down_weight):
one Qwen3.5 decoder layer, Pre-Norm, with a stand-in mixer (a plain matrix instead of attention):
  x = x + mixer( norm1(x) )             mixer(h) = h @ mixer_weight.T
  x = x + mlp( norm2(x) )               mlp(h) = down( silu(gate(h)) * up(h) ), no biases
norm is the zero-centred RMSNorm of chapter 3: x / sqrt(mean(x^2) + eps) * (1 + w), over the last
dimension. Shapes: x (..., hidden), norm weights (hidden,), mixer_weight (hidden, hidden),
gate/up (intermediate, hidden), down (hidden, intermediate). Everything is fp32; return x's shape.
Changing an input in place is allowed (x += ...): the judge keeps its own copy.

Checked: within atol=1e-4, rtol=1e-4, on the model's own layer-0 norms and MLP and on small random
ones. Known mistakes are named: Post-Norm wiring, normalizing the stream itself instead of the
sublayer's input, the two norms swapped, both sublayers reading the same input, the MLP reading the
first norm's output, w instead of 1 + w, the RMS over the whole tensor instead of each token's
last dimension, the mixer without the .T or its output reshaped instead of transposed back.

练习 230 · 解码层的残差连接（简单；需要 PyTorch）

decoder_layer(x, norm1_weight, norm2_weight, eps, mixer_weight, gate_weight, up_weight, down_weight)：
Qwen3.5 的一个解码层，Pre-Norm，用一个替身 mixer（一个普通矩阵代替注意力）：
  x = x + mixer( norm1(x) )             mixer(h) = h @ mixer_weight.T
  x = x + mlp( norm2(x) )               mlp(h) = down( silu(gate(h)) * up(h) )，没有偏置
norm 是第 3 章的零中心 RMSNorm：x / sqrt(mean(x^2) + eps) * (1 + w)，在最后一维上计算。形状：x 为
(..., hidden)，两个归一化权重为 (hidden,)，mixer_weight 为 (hidden, hidden)，gate/up 为
(intermediate, hidden)，down 为 (hidden, intermediate)。全部是 fp32；返回与 x 形状相同的结果。
可以原地修改输入（x += ...）：评测器保留了自己的副本。

检查方式：在模型自己的第 0 层归一化与 MLP 上、以及小的随机权重上，误差在 atol=1e-4、rtol=1e-4 以内。
已知错误会被指出：Post-Norm 连接、对残差流本身而不是子层输入做归一化、两个归一化用反、两个子层读同一个输入、
MLP 读了第一个归一化的输出、用 w 而不是 1 + w、RMS 在整个张量上而不是每个词元的最后一维上计算、mixer 漏了 .T
或者它的输出用 reshape 而不是转置变回来。

Check: python practice/judge.py 230
"""
import torch
import torch.nn.functional as F


def decoder_layer(x, norm1_weight, norm2_weight, eps, mixer_weight, gate_weight, up_weight, down_weight):
    raise NotImplementedError
