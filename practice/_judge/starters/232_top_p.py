"""Exercise 232 · Top-p (nucleus) filtering (easy; needs PyTorch)

top_p_filter(logits, p): logits (..., vocab) fp32 and 0 < p < 1. Keep the smallest set of the most
likely tokens whose probabilities sum to at least p; set every other logit to -inf. Sorted by
probability, a token is kept when the probability mass before it is still below p: so the token
that takes the sum past p is kept, and the most likely token always is. Return a tensor of the
same shape, in vocabulary order (kept logits unchanged), computed along the last dimension.
Changing logits in place is allowed (logits[drop] = -inf; return logits): the judge keeps its own copy.

Checked: exactly (the kept logits are copied, the rest -inf). Known mistakes are named: the token
that crosses p dropped, the mass summed in vocabulary order instead of sorted, the result left in
sorted order.

练习 232 · top-p（核）过滤（简单；需要 PyTorch）

top_p_filter(logits, p)：logits 为 (..., vocab) 的 fp32，0 < p < 1。保留概率之和至少为 p 的、最可能的
词元组成的最小集合；其余 logit 设为 -inf。按概率排序后，一个词元之前的概率质量仍小于 p 时就保留它：
所以使总和越过 p 的那个词元会被保留，最可能的词元也总会被保留。返回形状相同、按词表顺序排列的张量
（保留的 logit 不变），沿最后一维计算。
可以原地修改输入 logits（logits[drop] = -inf; return logits）：评测器保留了自己的副本。

检查方式：完全相同（保留的 logit 原样复制，其余为 -inf）。已知错误会被指出：丢掉了越过 p 的词元、
按词表顺序而不是排序后累加质量、结果停留在排序后的顺序。

Check: python practice/judge.py 232
"""
import torch


def top_p_filter(logits, p):
    raise NotImplementedError
