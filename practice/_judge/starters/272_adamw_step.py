"""Exercise 272 · One AdamW step (medium; needs PyTorch)

adamw_step(params, grads, state, lr, betas, eps, weight_decay, step) -> (params, state): one update
of chapter 14's optimizer, step for step what torch.optim.AdamW does with qwen/train.py
decay_groups' two groups. params and grads: {name: fp32 tensor}; state: {name: {"exp_avg": m,
"exp_avg_sq": v}} after step - 1 steps (zeros before step 1); betas = (b1, b2); step = 1, 2, ...
For each parameter p with gradient g:
  1. Weight decay only for tensors of 2 or more dimensions (matrices, the conv kernel): a norm's
     weight, a bias, A_log, dt_bias (1 dimension) get none. Decoupled, on the weight itself:
     p = p * (1 - lr * weight_decay); the gradient stays as it is.
  2. m = b1 m + (1 - b1) g,   v = b2 v + (1 - b2) g^2.
  3. p = p - lr * m_hat / (sqrt(v_hat) + eps), with the bias correction
     m_hat = m / (1 - b1^step), v_hat = v / (1 - b2^step) (the moments start at 0).
Return the new params and the new state (m and v, not m_hat and v_hat) in new dicts with the same
names, as a tuple. Do not modify the inputs.

Checked: every parameter and moment within atol=1e-08, rtol=1e-05 (parameters near 0 and moments of
1e-6 need a small atol) of torch.optim.AdamW's step, on 4 cases (steps 1, 2 and 6 with lr 1e-2,
weight_decay 0.1; step 4 with betas (0.8, 0.95), eps 1e-6, weight_decay 0.3), on the checkpoint's
tensors of each kind: a matrix, the conv kernel, a norm's weight, dt_bias and A_log. Known mistakes
are named: no bias correction, weight decay added to the gradient (Adam's L2), decay on the norms
and the other vectors.

练习 272 · AdamW 的一步（中等；需要 PyTorch）

adamw_step(params, grads, state, lr, betas, eps, weight_decay, step) -> (params, state)：第 14 章优化器的一次
更新，每一步都与 torch.optim.AdamW 用 qwen/train.py 的 decay_groups 的两组参数所做的相同。params 和 grads：
{名字: fp32 张量}；state：{名字: {"exp_avg": m, "exp_avg_sq": v}}，是 step - 1 步之后的状态（第 1 步之前全是 0）；
betas = (b1, b2)；step = 1, 2, ...。对每个参数 p 和它的梯度 g：
  1. 只对 2 维及以上的张量（矩阵、卷积核）做权重衰减：范数的权重、偏置、A_log、dt_bias（1 维）不衰减。
     解耦，直接作用在权重上：p = p * (1 - lr * weight_decay)；梯度保持原样。
  2. m = b1 m + (1 - b1) g，  v = b2 v + (1 - b2) g^2。
  3. p = p - lr * m_hat / (sqrt(v_hat) + eps)，其中偏差修正
     m_hat = m / (1 - b1^step)，v_hat = v / (1 - b2^step)（矩从 0 开始）。
用同样的名字、新的字典返回新的 params 和新的 state（m 和 v，不是 m_hat 和 v_hat），作为一个 tuple。不要修改输入。

检查方式：每个参数和矩与 torch.optim.AdamW 的一步相差在 atol=1e-08、rtol=1e-05 以内（接近 0 的参数和 1e-6
大小的矩需要很小的 atol），共 4 个用例（lr 1e-2、weight_decay 0.1 的第 1、2、6 步；betas (0.8, 0.95)、eps 1e-6、
weight_decay 0.3 的第 4 步），用检查点里每一类张量：一个矩阵、卷积核、一个范数的权重、dt_bias 和 A_log。已知错误
会被指出：没有偏差修正、把权重衰减加到梯度上（Adam 的 L2）、对范数和其他向量也做衰减。

Check: python practice/judge.py 272
"""
import torch


def adamw_step(params, grads, state, lr, betas, eps, weight_decay, step):
    raise NotImplementedError
