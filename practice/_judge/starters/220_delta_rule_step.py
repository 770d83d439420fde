"""Exercise 220 · One step of the gated delta rule (medium; needs PyTorch)

delta_rule_step(S, k, v, g, beta): one token of linear attention's memory update, for every batch
and head at once. S (batch, heads, dk, dv) is the state; k (batch, heads, dk) a unit-length key;
v (batch, heads, dv) its value; g and beta (batch, heads) the log decay (<= 0) and the write
strength (0 to 1). In this order:
  1. decay:  S = S * exp(g)
  2. read:   the prediction for k, k^T S (sum over dk): shape (batch, heads, dv)
  3. write:  S = S + k (beta * (v - k^T S))^T   (an outer product per batch and head)
Return the new S. read_state(S, q): the output S^T q (sum over dk), shape (batch, heads, dv).
All inputs are fp32; return fp32. Checked to atol = rtol = 1e-5 (1e-4 relative on the case made by
the checkpoint's own layer). Do not modify the inputs.

练习 220 · 带门的 delta 规则的一步（中等；需要 PyTorch）

delta_rule_step(S, k, v, g, beta)：线性注意力记忆的一次更新（一个词元），所有 batch 和头一起算。
S（batch, heads, dk, dv）是状态；k（batch, heads, dk）是长度为 1 的键；v（batch, heads, dv）是它的值；
g 和 beta（batch, heads）是对数衰减（<= 0）和写入强度（0 到 1）。按这个顺序：
  1. 衰减：S = S * exp(g)
  2. 读：  对 k 的预测 k^T S（沿 dk 求和）：形状 (batch, heads, dv)
  3. 写：  S = S + k (beta * (v - k^T S))^T   （每个 batch 和头一个外积）
返回新的 S。read_state(S, q)：输出 S^T q（沿 dk 求和），形状 (batch, heads, dv)。
输入都是 fp32；返回 fp32。容差 atol = rtol = 1e-5（由检查点自己的层生成的用例为相对 1e-4）。不要修改输入。

Check: python practice/judge.py 220
"""
import torch


def delta_rule_step(S, k, v, g, beta):
    raise NotImplementedError


def read_state(S, q):
    raise NotImplementedError
