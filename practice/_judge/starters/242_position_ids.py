"""Exercise 242 · The 3D position ids of a prompt with images (medium; needs PyTorch)

position_ids(ids, grid_thw, image_token_id, merge_size) -> (3, seq) int64: the (time, height,
width) positions that multimodal RoPE gives every token of one prompt. ids (seq,) int64 holds the
prompt's tokens, each image's pad tokens already expanded: image i is a run of
t * (h // merge_size) * (w // merge_size) tokens equal to image_token_id, where (t, h, w) =
grid_thw[i] is its patch grid (images in the order they appear). Walk the prompt with a running
position p, starting at 0:
  - a text token gets (p, p, p), then p += 1 (three equal streams: plain RoPE);
  - an image's tokens are its merged grid in row-major order (time, then row, then column): the
    token at time a, row r, column c of the (t, h // merge_size, w // merge_size) grid gets
    (p + a, p + r, p + c). Then p += max(h, w) // merge_size, whatever t is, as transformers'
    get_rope_index computes it: NOT p + its number of tokens (a 448 x 448 image is a 28 x 28 patch
    grid, 14 x 14 = 196 tokens, and spans 14 positions, not 196), and not past the time positions
    (5 frame groups of a 1 x 2 merged grid: p += 2, though the time stream reached p + 4).
  - image i is exactly its own t * (h // merge_size) * (w // merge_size) tokens: two images may
    stand side by side, so count from grid_thw, not by runs of image tokens.
Do not modify the inputs.

Checked: exactly (int64, shape (3, seq)). Known mistakes are named: the text after an image placed
at + its number of tokens, one position too far after it, after its time positions too, or
max(h, w) before the merge; the image numbered like text, rows and columns swapped, the image's
time stream not starting at p, two images side by side read as one.

练习 242 · 带图像的提示词的三维位置编号（中等；需要 PyTorch）

position_ids(ids, grid_thw, image_token_id, merge_size) -> (3, seq) int64：多模态 RoPE 给一个提示词里
每个词元的（时间、高、宽）位置。ids (seq,) int64 是提示词的词元，每张图像的占位词元已经展开：第 i 张图像
是连续 t * (h // merge_size) * (w // merge_size) 个等于 image_token_id 的词元，其中 (t, h, w) =
grid_thw[i] 是它的图块网格（图像按出现的顺序排列）。用一个当前位置 p 从 0 开始走过提示词：
  - 文本词元得到 (p, p, p)，然后 p += 1（三路相等：普通的 RoPE）；
  - 图像的词元是合并后的网格，按行优先的顺序（先时间，再行，再列）：在 (t, h // merge_size,
    w // merge_size) 网格中时间 a、第 r 行、第 c 列的词元得到 (p + a, p + r, p + c)。然后
    p += max(h, w) // merge_size，与 t 无关，和 transformers 的 get_rope_index 一样：而不是 p + 它的词元数
    （448 x 448 的图像是 28 x 28 的图块网格，14 x 14 = 196 个词元，只占 14 个位置，而不是 196 个），也不越过
    时间位置（5 组帧、合并后 1 x 2 的网格：p += 2，尽管时间一路到了 p + 4）。
  - 第 i 张图像正好是它自己的 t * (h // merge_size) * (w // merge_size) 个词元：两张图像可能紧挨着，
    所以要按 grid_thw 数，而不是按连续的图像词元分段。
不要修改输入。

检查方式：完全相同（int64，形状 (3, seq)）。已知错误会被指出：图像之后的文本放在了 + 词元数处、
多跳了一个位置、越过了时间位置、用了合并之前的 max(h, w)；图像像文本一样编号、行和列互换、图像的时间一路
没有从 p 开始、紧挨着的两张图像被当成一张。

Check: python practice/judge.py 242
"""
import torch


def position_ids(ids, grid_thw, image_token_id, merge_size):
    raise NotImplementedError
