"""Exercise 205 · l2norm, and where eps goes (easy; needs PyTorch)

l2norm(x, eps): scale each vector along the last dimension to length 1,
  y = x / sqrt(sum(x^2) + eps)
with eps added to the sum of squares, inside the root. Linear attention (chapter 7) applies it to
q and k. Compute in the input's dtype, as the model does. An all-zero vector must give zeros.

练习 205 · L2 归一化，以及 eps 放在哪里（简单；需要 PyTorch）

l2norm(x, eps)：把最后一维上的每个向量缩放到长度 1，
  y = x / sqrt(sum(x^2) + eps)
eps 加在平方和上、在根号里面。线性注意力（第 7 章）对 q 和 k 使用它。按输入的类型计算，
和模型一样。全零向量必须得到全零。

Check: python practice/judge.py 205
"""
import torch


def l2norm(x, eps=1e-6):
    raise NotImplementedError
