"""Exercise 232 · Top-p (nucleus) filtering (easy; needs PyTorch)

top_p_filter(logits, p): logits (..., vocab) fp32 and 0 < p < 1. Keep the smallest set of the most
likely tokens whose probabilities sum to at least p; set every other logit to -inf. Sorted by
probability, a token is kept when the probability mass before it is still below p: so the token
that takes the sum past p is kept, and the most likely token always is. Return a tensor of the
same shape, in vocabulary order (kept logits unchanged), computed along the last dimension
(logits may have more than two dimensions, e.g. (batch, position, vocab)).
Changing logits in place is allowed (logits[drop] = -inf; return logits): the judge keeps its own copy.

Exactly p: when the first n tokens hold exactly p, they are the set. The next token's mass before
it is p, not below p, so it is dropped (two cases are built with masses exactly p: probabilities
1/2, 1/4, 1/8, ... and eight logits of 1/8 each, exact in fp32).
Ties: equal logits have equal probabilities. When the cut falls among equal logits, any of them
may be kept, as long as their number is right: the rule gives the same number whichever of them
the sort puts first.

Checked: exactly, with no tolerance (atol=0, rtol=0): each kept logit copied bit for bit, the rest
-inf, and in each row the number of kept tokens the rule gives, the most likely ones. Known
mistakes are named: the token that crosses p dropped, one token too many kept, the mass summed in
vocabulary order instead of sorted, the result left in sorted order, probabilities returned
instead of logits, the filter run along dimension 1.

练习 232 · top-p（核）过滤（简单；需要 PyTorch）

top_p_filter(logits, p)：logits 为 (..., vocab) 的 fp32，0 < p < 1。保留概率之和至少为 p 的、最可能的
词元组成的最小集合；其余 logit 设为 -inf。按概率排序后，一个词元之前的概率质量仍小于 p 时就保留它：
所以使总和越过 p 的那个词元会被保留，最可能的词元也总会被保留。返回形状相同、按词表顺序排列的张量
（保留的 logit 不变），沿最后一维计算（logits 可能不止两维，例如 (batch, position, vocab)）。
可以原地修改输入 logits（logits[drop] = -inf; return logits）：评测器保留了自己的副本。

正好等于 p：前 n 个词元的质量正好是 p 时，它们就是这个集合。下一个词元之前的质量是 p，不小于 p，所以
丢掉它（有两个用例的质量正好是 p：概率为 1/2、1/4、1/8……，以及八个各为 1/8 的 logit，在 fp32 中精确）。
并列：相等的 logit 概率也相等。切分处落在相等的 logit 之间时，保留其中哪几个都可以，只要数量对：不论排序
把哪一个放在前面，规则给出的数量都一样。

检查方式：完全相同，没有容差（atol=0，rtol=0）：保留的 logit 逐位原样复制，其余为 -inf，每一行保留的
词元数量等于规则给出的数量，并且是最可能的那些。已知错误会被指出：丢掉了越过 p 的词元、多保留了一个词元、
按词表顺序而不是排序后累加质量、结果停留在排序后的顺序、返回了概率而不是 logits、沿第 1 维做过滤。

Check: python practice/judge.py 232
"""
import torch


def top_p_filter(logits, p):
    raise NotImplementedError
