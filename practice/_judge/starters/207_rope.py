"""Exercise 207 · RoPE with partial rotation (medium; needs PyTorch)

rope_frequencies(head_dim, partial_rotary_factor, theta): the rotation frequencies of one head.
  Only rotary_dim = int(head_dim * partial_rotary_factor) entries rotate (Qwen3.5-0.8B: 256 * 0.25
  = 64), in rotary_dim / 2 pairs; pair i turns by f_i = 1 / theta^(2i / rotary_dim) per token.
  Return the rotary_dim / 2 frequencies, fp32, computed in fp32: torch.arange(0, rotary_dim, 2,
  dtype=torch.float32) / rotary_dim as the exponents.
apply_rope(x, positions, inv_freq): rotate x (batch, heads, seq, head_dim) to its positions.
  positions: (seq,) integers; inv_freq: (rotary_dim / 2,) fp32. The angle of pair i at position m
  is m * f_i, computed in fp32 (positions.float()). Pairs are "rotate-half": entry i is paired
  with entry i + rotary_dim / 2 (not with its neighbour i + 1), and the pair (a, b) becomes
  (a cos - b sin, b cos + a sin). Entries from rotary_dim on pass through unchanged. Compute in
  fp32 and return x's dtype (one rounding at the end). Do not modify the inputs.

Checked: frequencies within atol=1e-7, rtol=1e-6. apply_rope's fp32 results within atol=1e-5,
rtol=1e-5 for positions below 100; for positions up to 3000 within atol=1e-3 (an fp32 angle near
3000 is only accurate to about 1e-4 rad, so fp32 and fp64 angles give slightly different cosines).
The bf16 case is compared bit for bit (99% of the values identical, the rest one step away):
fp32 inside and one rounding give the same bits whatever the order of operations.

练习 207 · 带部分旋转的 RoPE（中等；需要 PyTorch）

rope_frequencies(head_dim, partial_rotary_factor, theta)：一个头的旋转频率。只有
  rotary_dim = int(head_dim * partial_rotary_factor) 个数旋转（Qwen3.5-0.8B：256 * 0.25 = 64），
  组成 rotary_dim / 2 对；第 i 对每个词元转 f_i = 1 / theta^(2i / rotary_dim)。返回这 rotary_dim / 2
  个频率，fp32，并在 fp32 中计算：指数用 torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim。
apply_rope(x, positions, inv_freq)：把 x（batch, heads, seq, head_dim）转到各自的位置。
  positions：(seq,) 的整数；inv_freq：(rotary_dim / 2,) 的 fp32。第 i 对在位置 m 的角度是 m * f_i，
  在 fp32 中计算（positions.float()）。配对方式是 "rotate-half"：第 i 个数与第 i + rotary_dim / 2 个数
  配对（不是与相邻的第 i + 1 个），(a, b) 变成 (a cos - b sin, b cos + a sin)。从第 rotary_dim 个数起
  原样通过。在 fp32 中计算，返回 x 的类型（最后只舍入一次）。不要修改输入。

检查方式：频率在 atol=1e-7、rtol=1e-6 以内。apply_rope 的 fp32 结果：位置小于 100 时在 atol=1e-5、
rtol=1e-5 以内；位置到 3000 时在 atol=1e-3 以内（3000 附近的 fp32 角度只精确到约 1e-4 弧度，所以
fp32 和 fp64 的角度给出的余弦略有不同）。bf16 用例逐位比较（99% 的数值完全相同，其余相差一个最小
间隔）：内部用 fp32、最后舍入一次，无论运算顺序如何得到的位都相同。

Check: python practice/judge.py 207
"""
import torch


def rope_frequencies(head_dim, partial_rotary_factor, theta):
    raise NotImplementedError


def apply_rope(x, positions, inv_freq):
    raise NotImplementedError
