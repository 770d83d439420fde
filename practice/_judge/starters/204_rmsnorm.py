"""Exercise 204 · Zero-centred RMSNorm and gated RMSNorm (easy; needs PyTorch)

rms_norm(x, weight, eps): normalize the last dimension of x to a root mean square of 1,
  y = x / sqrt(mean(x^2) + eps), then scale by (1 + weight): Qwen3.5 stores the weight as w - 1.
gated_rms_norm(x, gate, weight, eps): normalize the same way, then multiply by weight (a plain
  scale here, not 1 + w) and by silu(gate); gate has the same shape as x.
Both: compute in fp32 whatever the input dtype, and cast the result back to x's dtype once, at
the end. Do not modify the inputs.

练习 204 · 零中心的 RMSNorm 与带门的 RMSNorm（简单；需要 PyTorch）

rms_norm(x, weight, eps)：把 x 的最后一维归一化到均方根为 1，y = x / sqrt(mean(x^2) + eps)，
  再乘 (1 + weight)：Qwen3.5 存的权重是 w - 1。
gated_rms_norm(x, gate, weight, eps)：同样归一化，然后乘 weight（这里是普通的缩放，不是 1 + w），
  再乘 silu(gate)；gate 与 x 形状相同。
两者都要：无论输入是什么类型都在 fp32 中计算，最后只把结果转回 x 的类型一次。不要修改输入。

Check: python practice/judge.py 204
"""
import torch
import torch.nn.functional as F


def rms_norm(x, weight, eps=1e-6):
    raise NotImplementedError


def gated_rms_norm(x, gate, weight, eps=1e-6):
    raise NotImplementedError
