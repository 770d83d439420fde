"""Exercise 260 · int8 quantization per row, and back (easy; needs PyTorch)

quantize_int8(w) -> (q, scale): w is a weight (out, in), fp32, one row per output channel (it
may arrive transposed, not contiguous). Symmetric absmax quantization, one scale per row:
  1. scale = w.abs().amax(dim=1) / 127: shape (out,), fp32; each row's largest |w| maps to +-127.
     A row of zeros has max |w| = 0, and w / 0 is NaN: give it scale 1 (any scale gives q = 0 there;
     1 is what qwen/quant.py uses).
  2. q = round(w / scale[:, None]), clamped to -127..127, as int8: shape (out, in). Round as
     torch.round does: a value exactly on .5 goes to the even code (2.5 -> 2, -2.5 -> -2, 3.5 -> 4),
     not away from zero (floor(|x| + 0.5) gives 3 and -3).
Compute exactly so (divide w by the scale): w * (127 / amax) is the same number up to rounding, and
can send a value that sits on .5 to the other code.

dequantize_int8(q, scale) -> w': (out, in) fp32, each code times its row's scale.
Do not modify the inputs.

Checked: q exactly (int8) and scale in fp32 relative to its size (atol=0, rtol=1e-05: the scales
are small, 1e-4 to 1e-2), on 6 weights (rows of the checkpoint's layers.0.mlp.gate_proj; an outlier;
negative rows; a transposed one; rows of zeros; values exactly on .5 of a step); w' (atol=0,
rtol=1e-05) on 2. Known mistakes are named: one scale for the whole tensor or per column,
truncating instead of rounding, halves rounded away from zero, w * (127 / amax), dividing by 255
(an unsigned byte's span) for a signed range, and the scale 0 (or an epsilon's) of a row of zeros.

练习 260 · 每行 int8 量化，以及反量化（简单；需要 PyTorch）

quantize_int8(w) -> (q, scale)：w 是一个权重 (out, in)，fp32，每行对应一个输出通道（它可能是转置过的、
不连续的）。对称的 absmax 量化，每行一个缩放因子：
  1. scale = w.abs().amax(dim=1) / 127：形状 (out,)，fp32；每行最大的 |w| 映射到 +-127。
     全 0 的行 max |w| = 0，而 w / 0 是 NaN：让它的缩放因子为 1（那里任何缩放因子都给出 q = 0；
     qwen/quant.py 用的是 1）。
  2. q = round(w / scale[:, None])，钳位到 -127..127，转成 int8：形状 (out, in)。按 torch.round 的方式
     取整：正好在 .5 上的值取偶数编码（2.5 -> 2，-2.5 -> -2，3.5 -> 4），而不是远离 0（floor(|x| + 0.5)
     给出 3 和 -3）。
请完全照此计算（用 w 除以缩放因子）：w * (127 / amax) 在舍入误差内是同一个数，
但可能把正好落在 .5 上的值送到另一个编码。

dequantize_int8(q, scale) -> w'：(out, in) fp32，每个编码乘以它那一行的缩放因子。
不要修改输入。

检查方式：q 必须完全相同（int8），scale 在 fp32 下按相对大小比较（atol=0、rtol=1e-05：缩放因子很小，
1e-4 到 1e-2），共 6 个权重（检查点的 layers.0.mlp.gate_proj 的若干行；一个离群值；全负的行；一个转置过的；
全 0 的行；正好落在步长 .5 上的值）；w' 在 2 个用例上比较（atol=0、rtol=1e-05）。已知错误会被指出：整个张量
一个缩放因子或每列一个、截断而不是取整、一半时远离 0 舍入、w * (127 / amax)、对有符号的范围除以 255
（无符号字节的跨度），以及全 0 的行的缩放因子为 0（或一个 epsilon）。

Check: python practice/judge.py 260
"""
import torch


def quantize_int8(w):
    raise NotImplementedError


def dequantize_int8(q, scale):
    raise NotImplementedError
