"""Exercise 203 · Embedding lookup and tied logits (easy; needs PyTorch)

embed(ids, E): ids is a tensor of token ids of any shape; return the rows of the table E for
  them, shape ids.shape + (dim,), in E's dtype (no conversion).
tied_logits(h, E): the output layer is the embedding table itself, so the score of token i is
  h . E[i]. h has shape (..., dim); return every score at once, shape (..., vocab), in fp32
  (upcast h and E to fp32 first: bf16 products lose precision). Do not modify the inputs.

Checked: embed bit for bit (it only copies rows); tied_logits within atol=1e-4, rtol=1e-4 (the
order of the sums in a matrix product may differ).

练习 203 · 嵌入查表与共享输出层的 logits（简单；需要 PyTorch）

embed(ids, E)：ids 是任意形状的词元编号张量；返回嵌入表 E 中对应的行，形状 ids.shape + (dim,)，
  类型与 E 相同（不转换）。
tied_logits(h, E)：输出层就是嵌入表本身，所以词元 i 的分数是 h . E[i]。h 的形状是 (..., dim)；
  一次返回所有分数，形状 (..., vocab)，类型 fp32（先把 h 和 E 转成 fp32：bf16 的乘积会损失精度）。不要修改输入。

检查方式：embed 逐位比较（它只是复制行）；tied_logits 在 atol=1e-4、rtol=1e-4 以内（矩阵乘法中
求和的顺序可能不同）。

Check: python practice/judge.py 203
"""
import torch


def embed(ids, E):
    raise NotImplementedError


def tied_logits(h, E):
    raise NotImplementedError
