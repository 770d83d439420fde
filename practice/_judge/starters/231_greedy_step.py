"""Exercise 231 · One greedy decode step with the cache (medium; needs PyTorch)

greedy_step(k_cache, v_cache, q, k_new, v_new, out_weight) -> (token, k, v): the attention part of
one decode step, as chapter 9 runs it. The cache holds the keys and values of the `past` tokens
already read, k_cache and v_cache (batch, kv_heads, past, head_dim). The new token brings its own
query q (batch, heads, 1, head_dim) and its key and value k_new, v_new (batch, kv_heads, 1,
head_dim), already normed and rotated. Do:
  1. append k_new, v_new to the cache along the sequence: k, v (batch, kv_heads, past + 1, head_dim);
  2. attend the query over all past + 1 keys (grouped-query: query head h reads kv head
     h // (heads // kv_heads)), scores / sqrt(head_dim), softmax;
  3. put the heads side by side (batch, heads * head_dim), score the vocabulary with
     @ out_weight.T (out_weight: (vocab, heads * head_dim), a stand-in for the rest of the model)
     and take the most likely token: token (batch,) int64.
Return (token, k, v). Everything is fp32.
Changing an input in place is allowed (the judge keeps its own copy).

Checked: the token of every row exactly, k and v within atol=1e-5, rtol=1e-5, on batches of 64,
16 and 8 decode steps (a mistake in the scores changes the argmax of only some rows). Known
mistakes are named: a causal mask not shifted by the cache's length, the new token's own key and
value left out, the old cache returned, the new key and value put before the cached ones, scores
not divided by sqrt(head_dim), query head h reading kv head h % kv_heads.

练习 231 · 带缓存的一步贪心解码（中等；需要 PyTorch）

greedy_step(k_cache, v_cache, q, k_new, v_new, out_weight) -> (token, k, v)：第 9 章里一步解码中
注意力的部分。缓存保存已读的 `past` 个词元的键和值：k_cache 和 v_cache，形状 (batch, kv_heads, past,
head_dim)。新词元带来它自己的查询 q (batch, heads, 1, head_dim) 和键、值 k_new、v_new
(batch, kv_heads, 1, head_dim)，都已做过归一化和旋转。要做的是：
  1. 沿序列维把 k_new、v_new 接到缓存后面：k、v 为 (batch, kv_heads, past + 1, head_dim)；
  2. 用这个查询关注全部 past + 1 个键（分组查询：查询头 h 读键值头 h // (heads // kv_heads)），
     分数除以 sqrt(head_dim)，softmax；
  3. 把各头并排成 (batch, heads * head_dim)，用 @ out_weight.T 给词表打分（out_weight 形状为
     (vocab, heads * head_dim)，代替模型的其余部分），取最可能的词元：token (batch,) int64。
返回 (token, k, v)。全部是 fp32。可以原地修改输入（评测器保留了自己的副本）。

检查方式：每一行的 token 必须完全相同，k 和 v 在 atol=1e-5、rtol=1e-5 以内，批次为 64、16 和 8 步解码
（分数上的错误只会改变一部分行的 argmax）。已知错误会被指出：因果掩码没有按缓存长度平移、漏掉新词元自己的
键和值、返回了旧缓存、新的键和值放在了缓存前面、分数没有除以 sqrt(head_dim)、查询头 h 读了键值头
h % kv_heads。

Check: python practice/judge.py 231
"""
import math

import torch


def greedy_step(k_cache, v_cache, q, k_new, v_new, out_weight):
    raise NotImplementedError
