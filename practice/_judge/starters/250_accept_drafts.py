"""Exercise 250 · The accept rule of speculative decoding (easy; needs PyTorch)

accept_drafts(drafts, logits) -> (count, next): one verification step of chapter 12. The MTP head
guessed k tokens, drafts (a list of k ints). The main model read the last chosen token and the k
drafts in one forward pass; logits (k + 1, vocab), fp32, are its scores after each of them:
row j is what the model predicts after the tokens before draft j + 1 (row 0: after the last
chosen token, before any draft; row k: after all k drafts).
  1. The model's own greedy choice after each prefix: argmax of each row.
  2. Keep the drafts from the first one on while each equals the model's choice at its place,
     and stop at the first that does not: count, from 0 to k.
  3. The next token is the model's own choice right after the kept drafts, never a draft.
Return (count, next) as two Python ints (a tuple). Do not modify the inputs.

Checked: both ints exactly, on 8 cases (1 to 5 drafts; all, none or some agreeing; a repeated
token; one case with the whole vocabulary of the checkpoint). Known mistakes are named: a count one
too many, the count incremented before the check, every agreeing draft counted, the next token
taken from the drafts or always from the last row, draft j compared with row j + 1, the last draft
never compared (range(k - 1)), and stopping at the first agreement instead of the first
disagreement.

练习 250 · 推测解码的接受规则（简单；需要 PyTorch）

accept_drafts(drafts, logits) -> (count, next)：第 12 章里的一步验证。MTP 头猜了 k 个词元，drafts
（k 个整数的列表）。主模型在一次前向计算里读了上一个选定的词元和这 k 个草稿；logits (k + 1, vocab)，fp32，
是它在每个词元之后的打分：第 j 行是模型在第 j + 1 个草稿之前的那些词元之后的预测（第 0 行：在上一个选定的
词元之后、任何草稿之前；第 k 行：在全部 k 个草稿之后）。
  1. 模型在每个前缀之后自己的贪心选择：每一行的 argmax。
  2. 从第一个草稿开始，只要它等于模型在那个位置的选择就保留，遇到第一个不相等的就停下：得到 count，0 到 k。
  3. 下一个词元是模型在保留的草稿之后自己的选择，永远不取草稿。
把 (count, next) 作为两个 Python 整数（一个 tuple）返回。不要修改输入。

检查方式：两个整数必须完全相同，共 8 个用例（1 到 5 个草稿；全部、没有或部分一致；一个重复的词元；其中一个用例
用检查点的整个词表）。已知错误会被指出：数目多了一个、先加数目再比较、把所有一致的草稿都数上、下一个词元取自草稿
或总是取自最后一行、第 j 个草稿和第 j + 1 行比较、最后一个草稿从没比较（range(k - 1)）、在第一次一致而不是
第一次不一致时停下。

Check: python practice/judge.py 250
"""
import torch


def accept_drafts(drafts, logits):
    raise NotImplementedError
