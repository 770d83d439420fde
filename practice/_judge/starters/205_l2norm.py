"""Exercise 205 · l2norm, and where eps goes (easy; needs PyTorch)

l2norm(x, eps): scale each vector along the last dimension to length 1,
  y = x / sqrt(sum(x^2) + eps)
with eps added to the sum of squares, inside the root. Linear attention (chapter 7) applies it to
q and k. Compute in the input's dtype, as the model does (it only ever passes fp32), and return
that dtype. Use the eps you are given. An all-zero vector must give zeros. Do not modify the inputs.

Checked against the exact value (computed in fp64, rounded once): fp32 results within atol=1e-5,
rtol=1e-5; the bf16 case within 3 bf16 steps, so any order of bf16 operations passes (x / sqrt,
x * rsqrt, torch.linalg.vector_norm), and so does computing in fp32 and rounding at the end.

练习 205 · L2 归一化，以及 eps 放在哪里（简单；需要 PyTorch）

l2norm(x, eps)：把最后一维上的每个向量缩放到长度 1，
  y = x / sqrt(sum(x^2) + eps)
eps 加在平方和上、在根号里面。线性注意力（第 7 章）对 q 和 k 使用它。按输入的类型计算，
和模型一样（模型只传入 fp32），并返回这个类型。要使用传入的 eps。全零向量必须得到全零。不要修改输入。

与精确值比较（在 fp64 中计算、只舍入一次）：fp32 结果在 atol=1e-5、rtol=1e-5 以内；bf16 用例在 3 个
bf16 最小间隔以内，所以 bf16 运算无论什么顺序都能通过（x / sqrt、x * rsqrt、torch.linalg.vector_norm），
在 fp32 中计算、最后舍入一次也可以。

Check: python practice/judge.py 205
"""
import torch


def l2norm(x, eps=1e-6):
    raise NotImplementedError
