"""Exercise 204 · Zero-centred RMSNorm and gated RMSNorm (easy; needs PyTorch)

rms_norm(x, weight, eps): normalize the last dimension of x to a root mean square of 1,
  y = x / sqrt(mean(x^2) + eps), then multiply by the scale 1 + weight: the file stores w, the scale is 1 + w.
gated_rms_norm(x, gate, weight, eps): normalize the same way, then multiply by weight (a plain
  scale here, not 1 + w) and by silu(gate); gate has the same shape as x.
Both: compute in fp32 whatever the input dtype, and cast the result back to x's dtype once, at
the end. Use the eps you are given (one case passes eps=1e-3). Do not modify the inputs.

Checked: fp32 results within atol=1e-5, rtol=1e-5 of the expected ones (any order of operations:
sqrt and divide, rsqrt, F.rms_norm in fp32). rms_norm's bf16/fp16 results: every value within one
bf16/fp16 step of the expected one, and at least 99% of them bit for bit equal: computing in fp32
and rounding once gives nearly always the same bits whatever the order, while computing in bf16
does not, and that is the mistake these cases catch. gated_rms_norm's bf16 results may be 2 bf16 steps away: the model's
reference implementation (transformers) rounds the normalized value to bf16 before the weight.

练习 204 · 零中心的 RMSNorm 与带门的 RMSNorm（简单；需要 PyTorch）

rms_norm(x, weight, eps)：把 x 的最后一维归一化到均方根为 1，y = x / sqrt(mean(x^2) + eps)，
  再乘缩放 1 + weight：文件存的是 w，缩放是 1 + w。
gated_rms_norm(x, gate, weight, eps)：同样归一化，然后乘 weight（这里是普通的缩放，不是 1 + w），
  再乘 silu(gate)；gate 与 x 形状相同。
两者都要：无论输入是什么类型都在 fp32 中计算，最后只把结果转回 x 的类型一次。要使用传入的 eps
（有一个用例传入 eps=1e-3）。不要修改输入。

检查方式：fp32 结果与期望值相差在 atol=1e-5、rtol=1e-5 以内（运算顺序不限：先开方再相除、rsqrt、
fp32 下的 F.rms_norm 都可以）。rms_norm 的 bf16/fp16 结果：每个数值与期望值相差不超过一个 bf16/fp16
最小间隔，并且至少 99% 的数值逐位相同：在 fp32 中计算、最后舍入一次，无论顺序如何几乎总是得到相同的位；
在 bf16 中计算则不然，这些用例正是要抓住这个错误。gated_rms_norm 的 bf16 结果可以相差 2 个 bf16 最小间隔：模型的
参考实现（transformers）在乘权重之前先把归一化的值舍入到 bf16。

Check: python practice/judge.py 204
"""
import torch
import torch.nn.functional as F


def rms_norm(x, weight, eps=1e-6):
    raise NotImplementedError


def gated_rms_norm(x, gate, weight, eps=1e-6):
    raise NotImplementedError
