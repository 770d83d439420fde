"""Exercise 271 · RMSNorm's backward by hand (medium; needs PyTorch)

rms_norm_backward(x, weight, eps, grad_out) -> (grad_x, grad_w): the gradients of Qwen3.5's
zero-centred RMSNorm, the backward that qwen/train.py RMSNormFunction writes out. The forward is
  y = x * r * (1 + w),   r = 1 / sqrt(mean(x^2) + eps)   (mean over the last dimension)
x (..., dim), weight w (dim,), grad_out = dL/dy, x's shape. With g = grad_out * (1 + w):
  grad_x = r * (g - x * r^2 * mean(g * x))      the second term: x moves its own rms too
  grad_w = grad_out * x * r, summed over every position (every dimension but the last)
Derive it or take it from here; compute in fp32 whatever the inputs' dtype (x.float(),
grad_out.float(), weight.float()), and return grad_x in x's dtype and grad_w in weight's dtype, each
cast once, at the end, as a tuple. Do not modify the inputs.

Checked: against autograd through qwen.train.rms_norm. fp32 results within atol=1e-5, rtol=1e-5, on
3 cases (embedding rows of the checkpoint with its layer-0 norm; a weight far from 0; small values
with eps=1e-3); bf16 results (x, weight and grad_out in bf16) within one bf16 step, at least 99% of
them bit for bit equal, on 1 case: fp32 then one rounding gives nearly always the same bits whatever
the order, bf16 statistics do not. Known mistakes are named: the term through the rms forgotten, w
instead of 1 + w, the statistics in bf16.

练习 271 · 手写 RMSNorm 的反向传播（中等；需要 PyTorch）

rms_norm_backward(x, weight, eps, grad_out) -> (grad_x, grad_w)：Qwen3.5 零中心 RMSNorm 的梯度，也就是
qwen/train.py 的 RMSNormFunction 写出来的反向传播。前向是
  y = x * r * (1 + w)，  r = 1 / sqrt(mean(x^2) + eps)   （在最后一维上取平均）
x (..., dim)，weight w (dim,)，grad_out = dL/dy，形状与 x 相同。令 g = grad_out * (1 + w)：
  grad_x = r * (g - x * r^2 * mean(g * x))      第二项：x 也会改变它自己的 rms
  grad_w = grad_out * x * r，对所有位置（除最后一维外的所有维）求和
可以自己推导，也可以直接用这里的公式；无论输入是什么类型都在 fp32 中计算（x.float()、grad_out.float()、
weight.float()），grad_x 返回 x 的类型，grad_w 返回 weight 的类型，各自只在最后转换一次，作为一个 tuple 返回。
不要修改输入。

检查方式：与经过 qwen.train.rms_norm 的 autograd 比较。fp32 结果相差在 atol=1e-5、rtol=1e-5 以内，共 3 个用例
（检查点的嵌入行配上它第 0 层的范数；远离 0 的权重；很小的值配 eps=1e-3）；bf16 结果（x、weight 和 grad_out
都是 bf16）每个数值与期望值相差不超过一个 bf16 最小间隔，并且至少 99% 逐位相同，共 1 个用例：在 fp32 中计算、
最后舍入一次，无论顺序如何几乎总是得到相同的位，bf16 的统计量则不然。已知错误会被指出：忘了经过 rms 的那一项、
用 w 代替 1 + w、统计量在 bf16 中计算。

Check: python practice/judge.py 271
"""
import torch


def rms_norm_backward(x, weight, eps, grad_out):
    raise NotImplementedError
