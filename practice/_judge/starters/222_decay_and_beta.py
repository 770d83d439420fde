"""Exercise 222 · Decay and beta from the raw parameters (easy; needs PyTorch)

log_decay(a, A_log, dt_bias): the log decay of each head at each token,
  g = -exp(A_log) * softplus(a + dt_bias)
a (batch, seq, heads) comes from in_proj_a(x), in the weights' dtype; A_log and dt_bias (heads,)
are learned per head (A_log is stored in fp32, dt_bias in bf16). Upcast everything to fp32 first
and return fp32. g < 0, so exp(g) in (0, 1) is the factor the state is multiplied by.
write_strength(b): beta = sigmoid(b), returned in fp32; b (batch, seq, heads) from in_proj_b(x).
Checked to atol = rtol = 1e-5 (beta from a bf16 b: relative 4e-3, so rounding it to bf16 before
upcasting also passes; the case a = -15, whose g is -3e-8 to -3e-6: atol = 1e-9, rtol = 1e-4, so a
softplus that loses small values fails it). Do not modify the inputs.

练习 222 · 从原始参数算衰减和 beta（简单；需要 PyTorch）

log_decay(a, A_log, dt_bias)：每个头在每个词元上的对数衰减，
  g = -exp(A_log) * softplus(a + dt_bias)
a（batch, seq, heads）来自 in_proj_a(x)，是权重的类型；A_log 和 dt_bias（heads,）按头学习（A_log 以
fp32 存储，dt_bias 是 bf16）。先把它们全部升到 fp32，返回 fp32。g < 0，所以 exp(g) 在 (0, 1) 之间，
状态就乘以它。
write_strength(b)：beta = sigmoid(b)，以 fp32 返回；b（batch, seq, heads）来自 in_proj_b(x)。
容差 atol = rtol = 1e-5（由 bf16 的 b 算 beta 时为相对 4e-3，所以先舍入到 bf16 再升到 fp32 也能通过；
a = -15 的用例 g 在 -3e-8 到 -3e-6 之间，容差 atol = 1e-9、rtol = 1e-4，丢掉小数值的 softplus 过不了）。不要修改输入。

Check: python practice/judge.py 222
"""
import torch
import torch.nn.functional as F


def log_decay(a, A_log, dt_bias):
    raise NotImplementedError


def write_strength(b):
    raise NotImplementedError
