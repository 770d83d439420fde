"""Exercise 206 · LayerNorm against RMSNorm (medium; needs PyTorch)

layer_norm(x, eps): LayerNorm without weight or bias along the last dimension:
  y = (x - mean) / sqrt(var + eps), var the population variance (divide by n). Statistics in
  fp32, result cast back to x's dtype.
rms_from_moments(x): the RMS of each vector computed from its moments, sqrt(var + mean^2), as
  an fp32 tensor of shape x.shape[:-1]. (RMS^2 = sigma^2 + mu^2: RMSNorm and LayerNorm agree
  when the mean is 0.) Do not modify the inputs.

Checked: fp32 results within atol=1e-5, rtol=1e-5 of the exact value; bf16 results within one
bf16 step of it, and at least 99% of them bit for bit equal, as fp32 statistics and one rounding give.

练习 206 · LayerNorm 与 RMSNorm 对比（中等；需要 PyTorch）

layer_norm(x, eps)：沿最后一维、没有权重和偏置的 LayerNorm：
  y = (x - 均值) / sqrt(方差 + eps)，方差是总体方差（除以 n）。统计量用 fp32，结果转回 x 的类型。
rms_from_moments(x)：用矩计算每个向量的均方根 sqrt(方差 + 均值^2)，返回形状为 x.shape[:-1]
  的 fp32 张量。（RMS^2 = sigma^2 + mu^2：均值为 0 时 RMSNorm 与 LayerNorm 一致。）不要修改输入。

检查方式：fp32 结果与精确值相差在 atol=1e-5、rtol=1e-5 以内；bf16 结果与它相差不超过一个 bf16 最小间隔，
并且至少 99% 逐位相同，这正是 fp32 统计量加一次舍入的结果。

Check: python practice/judge.py 206
"""
import torch


def layer_norm(x, eps=1e-6):
    raise NotImplementedError


def rms_from_moments(x):
    raise NotImplementedError
