"""Exercise 221 · The causal depthwise convolution (medium; needs PyTorch)

causal_conv1d(x, weight, past=None): the short convolution in front of linear attention.
x (batch, seq, channels); weight (channels, kernel): each channel has its own kernel and channels
never mix ("depthwise"). Causal: the output at token t mixes the inputs at t-kernel+1 .. t only,
  y[:, t, c] = sum over j of weight[c, j] * xp[:, t + j, c],
where xp is x with kernel-1 rows put before it along the sequence: zeros, or `past` when it is
given (batch, kernel-1, channels): the inputs that came before x, as kept during generation.
The last tap, weight[:, -1], multiplies token t itself. No silu here (the layer applies it after).
Return (batch, seq, channels) in x's dtype (fp32 here). Checked to atol = rtol = 1e-5.
Do not modify the inputs.

练习 221 · 因果逐通道卷积（中等；需要 PyTorch）

causal_conv1d(x, weight, past=None)：线性注意力前面的短卷积。x（batch, seq, channels）；
weight（channels, kernel）：每个通道有自己的卷积核，通道之间不混合（“逐通道”）。因果：词元 t 的输出
只混合 t-kernel+1 .. t 的输入，
  y[:, t, c] = 对 j 求和 weight[c, j] * xp[:, t + j, c]，
其中 xp 是在 x 前面（沿序列）放上 kernel-1 行：零，或者给出 `past` 时用它（batch, kernel-1, channels）：
x 之前的那些输入，也就是生成时保留下来的。最后一个抽头 weight[:, -1] 乘词元 t 自己。这里不做 silu
（这一层之后才做）。返回 (batch, seq, channels)，类型与 x 相同（这里是 fp32）。容差 atol = rtol = 1e-5。
不要修改输入。

Check: python practice/judge.py 221
"""
import torch


def causal_conv1d(x, weight, past=None):
    raise NotImplementedError
