"""Exercise 273 · LoRA: the forward and the merge (easy; needs PyTorch)

A LoRA adapter (chapter 16) keeps the weight W (out, in) frozen and learns A (r, in) and B (out, r),
fp32, scaled by alpha / r (a float: alpha 12 at r 8 is 1.5):
lora_forward(x, W, A, B, alpha, r) -> y: x (..., in) to (..., out),
  y = x W^T + (alpha / r) (x A^T) B^T
  as qwen/lora.py LoRALinear: the base's x @ W.T in W's dtype (x has it too), the adapter's path in
  fp32 from x.float(), the two added in fp32, the sum cast to W's dtype.
lora_merge(W, A, B, alpha, r) -> W': the adapter folded into the weight, as qwen/lora.py merge,
  W' = W + (alpha / r) B A       B @ A is (out, r) @ (r, in): W's shape
  added in fp32 (W.float()), rounded once to W's dtype at the end.
Do not modify the inputs.

Checked: fp32 results within atol=1e-5, rtol=1e-5 of qwen/lora.py's, on 2 forward and 2 merge cases
(up to 96 rows of the checkpoint's layers.0.mlp.gate_proj; a square block of its up_proj, where a
transposed delta keeps its shape); a bf16 forward (x and W in bf16, outputs of about 1) within
atol=0.01, rtol=0.01 (the base product rounded to bf16 before the fp32 sum, as nn.Linear gives it, or
not: where the adapter cancels the base, the two differ by a few bf16 steps); a bf16 merge within one
bf16 step and at least 99% of the values bit for bit equal: one rounding gives the same bits, two
(the delta rounded to bf16, then the sum) change many. Known mistakes are named: the scale alpha
instead of alpha / r, the delta transposed (A.T @ B.T), the merge added in bf16.

练习 273 · LoRA：前向与合并（简单；需要 PyTorch）

LoRA 适配器（第 16 章）保持权重 W (out, in) 冻结，学习 A (r, in) 和 B (out, r)，fp32，缩放为 alpha / r
（浮点数：r 为 8 时 alpha 12 就是 1.5）：
lora_forward(x, W, A, B, alpha, r) -> y：x (..., in) 到 (..., out)，
  y = x W^T + (alpha / r) (x A^T) B^T
  与 qwen/lora.py 的 LoRALinear 相同：基座的 x @ W.T 用 W 的类型（x 也是这个类型），适配器的路径从 x.float()
  开始在 fp32 中算，两者在 fp32 中相加，和转成 W 的类型。
lora_merge(W, A, B, alpha, r) -> W'：把适配器并进权重，与 qwen/lora.py 的 merge 相同，
  W' = W + (alpha / r) B A       B @ A 是 (out, r) @ (r, in)：与 W 形状相同
  在 fp32 中相加（W.float()），最后只舍入到 W 的类型一次。
不要修改输入。

检查方式：fp32 结果与 qwen/lora.py 的相差在 atol=1e-5、rtol=1e-5 以内，前向和合并各 2 个用例（检查点的
layers.0.mlp.gate_proj 的至多 96 行；它的 up_proj 的一个方块，转置的增量在那里形状不变）；一个 bf16 的前向（x 和 W
是 bf16，输出约为 1）相差在 atol=0.01、rtol=0.01 以内（基座的乘积在 fp32 相加之前是否像 nn.Linear 那样舍入到
bf16 都可以：适配器抵消基座的地方，两者相差几个 bf16 最小间隔）；
一个 bf16 的合并相差不超过一个 bf16 最小间隔，并且至少 99% 的数值逐位相同：舍入一次得到相同的位，舍入两次
（增量先舍入成 bf16，再舍入和）会改变许多位。已知错误会被指出：缩放用 alpha 而不是 alpha / r、增量被转置
（A.T @ B.T）、合并在 bf16 中相加。

Check: python practice/judge.py 273
"""
import torch


def lora_forward(x, W, A, B, alpha, r):
    raise NotImplementedError


def lora_merge(W, A, B, alpha, r):
    raise NotImplementedError
