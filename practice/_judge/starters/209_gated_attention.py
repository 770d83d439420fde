"""Exercise 209 · Causal attention with GQA and the output gate (medium; needs PyTorch)

gated_attention(q, k, v, gate, o_weight): the core of Qwen3.5's full-attention layer, after the
projections, q_norm/k_norm and RoPE.
  q: (batch, heads, seq, head_dim); k, v: (batch, kv_heads, seq, head_dim), heads a multiple of
  kv_heads; gate: (batch, seq, heads * head_dim); o_weight: (hidden, heads * head_dim).
  1. Grouped-query attention: query head h reads kv head h // (heads // kv_heads) (heads 0-3
     share kv head 0 when there are 4 per kv head).
  2. scores = q @ k^T / sqrt(head_dim); a query may read its own position and earlier ones only
     (causal: later keys get -inf before the softmax).
  3. weights = softmax(scores) over the keys, in fp32; out = weights @ v: (batch, heads, seq, head_dim).
  4. Put the heads side by side: (batch, seq, heads * head_dim), multiply by sigmoid(gate), and
     only then apply o_weight: result = (out * sigmoid(gate)) @ o_weight.T, (batch, seq, hidden).
Return q's dtype. Do not modify the inputs.

Checked: fp32 results within atol=1e-5, rtol=1e-4 (any order of sums; repeat_interleave or a
reshape for GQA; F.scaled_dot_product_attention with is_causal=True is fine too). One case has
bf16 inputs: the result must be bf16, within atol=0.02, rtol=0.02 of everything in fp32 rounded
once (not bit for bit: the softmax alone in fp32 with the rest in bf16, or SDPA in bf16, are correct
too and differ from it in about 50-65% of the values, by up to 0.008).

练习 209 · 带 GQA 和输出门的因果注意力（中等；需要 PyTorch）

gated_attention(q, k, v, gate, o_weight)：Qwen3.5 全注意力层的核心，在投影、q_norm/k_norm 和 RoPE 之后。
  q：(batch, heads, seq, head_dim)；k、v：(batch, kv_heads, seq, head_dim)，heads 是 kv_heads 的倍数；
  gate：(batch, seq, heads * head_dim)；o_weight：(hidden, heads * head_dim)。
  1. 分组查询注意力：查询头 h 读键值头 h // (heads // kv_heads)（每个键值头对应 4 个查询头时，
     查询头 0-3 共享键值头 0）。
  2. scores = q @ k^T / sqrt(head_dim)；查询只能读它自己的位置和之前的位置（因果：之后的键在 softmax
     之前设为 -inf）。
  3. weights = 对键做 softmax(scores)，在 fp32 中计算；out = weights @ v：(batch, heads, seq, head_dim)。
  4. 把各头并排：(batch, seq, heads * head_dim)，乘 sigmoid(gate)，然后才乘 o_weight：
     结果 = (out * sigmoid(gate)) @ o_weight.T，形状 (batch, seq, hidden)。
返回 q 的类型。不要修改输入。

检查方式：fp32 结果在 atol=1e-5、rtol=1e-4 以内（求和顺序不限；GQA 用 repeat_interleave 或 reshape
都可以；用 is_causal=True 的 F.scaled_dot_product_attention 也可以）。有一个用例的输入是 bf16：结果必须是
bf16，与“全部在 fp32 中计算、最后舍入一次”的结果相差在 atol=0.02、rtol=0.02 以内（不逐位比较：只有 softmax
用 fp32、其余用 bf16，或在 bf16 中用 SDPA，也都是正确的，它们与之约有 50-65% 的数值逐位不同，最多相差 0.008）。

Check: python practice/judge.py 209
"""
import math

import torch


def gated_attention(q, k, v, gate, o_weight):
    raise NotImplementedError
