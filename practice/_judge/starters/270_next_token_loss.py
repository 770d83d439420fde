"""Exercise 270 · The next-token loss, shifted, with an ignore index (easy; needs PyTorch)

next_token_loss(logits, labels, ignore_index=-100) -> loss: the training loss of chapter 14.
logits (batch, seq, vocab) are the model's scores, fp32 or bf16; labels (batch, seq) int64 are
aligned with the input ids (as transformers' labels=), so position t's logits predict label t + 1:
  1. scores = logits[:, :-1], targets = labels[:, 1:]: the last position predicts nothing here,
     the first label is predicted by nothing.
  2. A target equal to ignore_index (the prompt, padding; -100, or a real token id such as the
     padding token's) counts nowhere: not in the sum, not in the count.
  3. loss = the mean of -log_softmax(scores)[target] over the counted targets, with the
     log-softmax in fp32 whatever the logits' dtype (in bf16 a logit of 20 has steps of 0.125).
Return a 0-d fp32 tensor (what qwen/train.py next_token_loss returns). Do not modify the inputs.

Checked: the loss within atol=1e-5, rtol=1e-5 of qwen.train.next_token_loss, on 5 cases (a prompt
and padding labelled -100; every label counted; ignore_index=999, the padding token's id, a real
class; bf16 logits; fp32 logits up to about 150, where exp overflows). Known mistakes are named: no
shift, the shift the other way, the mean over every position (the ignored counted in the
denominator), the ignored scored as a class, the log-softmax in bf16.

练习 270 · 下一个词元的损失：移位与忽略索引（简单；需要 PyTorch）

next_token_loss(logits, labels, ignore_index=-100) -> loss：第 14 章的训练损失。logits (batch, seq, vocab)
是模型的打分，fp32 或 bf16；labels (batch, seq) 是 int64，与输入的 id 对齐（和 transformers 的 labels= 一样），
所以位置 t 的 logits 预测标签 t + 1：
  1. scores = logits[:, :-1]，targets = labels[:, 1:]：最后一个位置在这里不预测任何东西，第一个标签没有谁来预测。
  2. 等于 ignore_index 的目标（提示词、填充；-100，或者一个真实的词元编号，比如填充词元的）哪里都不计：
     不加到总和里，也不计入个数。
  3. loss = 对计入的目标求 -log_softmax(scores)[target] 的平均，无论 logits 是什么类型，log-softmax 都在 fp32 中算
     （在 bf16 中，20 左右的 logit 的步长是 0.125）。
返回一个 0 维的 fp32 张量（qwen/train.py 的 next_token_loss 返回的就是这样）。不要修改输入。

检查方式：损失与 qwen.train.next_token_loss 相差在 atol=1e-5、rtol=1e-5 以内，共 5 个用例（标为 -100 的提示词
和填充；每个标签都计入；ignore_index=999，即填充词元的编号，是一个真实的类别；bf16 的 logits；大到约 150 的
fp32 logits，exp 会溢出）。已知错误会被指出：没有移位、移位方向反了、对所有位置求平均（被忽略的也算进分母）、
被忽略的位置被当成一个类别计分、log-softmax 在 bf16 中计算。

Check: python practice/judge.py 270
"""
import torch


def next_token_loss(logits, labels, ignore_index=-100):
    raise NotImplementedError
