"""Exercise 241 · Image patches in merge-block order (medium; needs PyTorch)

patchify(frames, patch_size, temporal_patch_size, merge_size) -> (patches, C * T * P * P): cut the
frames into the rows the vision tower reads. frames (F, C, H, W) fp32: F frames (a still image is
repeated to T = temporal_patch_size frames, so F = T for it; F may be any multiple of T), C channels,
H and W multiples of P * m (P = patch_size, m = merge_size). Each patch is a T x P x P cube of every
channel; with gh = H / P patch rows, gw = W / P patch columns and t = F / T groups of frames there are
t * gh * gw patches, one per row.
Row order: group by group of frames; inside a group, block by block of m x m neighbouring patches
(blocks in raster order: left to right, then down), and inside a block its m * m patches row by row
(for m = 2: top-left, top-right, bottom-left, bottom-right). This "merge-block order" puts the 4
patches that the merger later joins into one token one after another.
Values of a row: channel, then frame, then pixel row, then pixel column, (C, T, P, P) flattened, the
layout of the patch embedding's Conv3d weight (out, C, T, P, P).
Checked: exactly (atol = rtol = 0), the values are only moved. Do not modify the inputs.
Known mistakes are named: raster order (row by row of patches), frame before channel in a row,
channels last, the patches of a block taken column by column, the blocks in column-major order, the
frames grouped (T, t), each patch's rows and columns transposed, gh and gw swapped.

练习 241 · 按合并块顺序切出图块（中等；需要 PyTorch）

patchify(frames, patch_size, temporal_patch_size, merge_size) -> (patches, C * T * P * P)：把帧切成视觉塔
读取的行。frames (F, C, H, W) 为 fp32：F 帧（静止图像重复成 T = temporal_patch_size 帧，所以它的 F = T；
F 可以是 T 的任意倍数），C 个通道，H 和 W 是 P * m 的倍数（P = patch_size，m = merge_size）。每个图块是
所有通道的 T x P x P 立方块；图块共有 gh = H / P 行、gw = W / P 列，帧分成 t = F / T 组，所以一共
t * gh * gw 个图块，每个一行。
行的顺序：一组帧接一组帧；组内一个合并块接一个合并块（每块是 m x m 个相邻的图块，块按光栅顺序：先从左到右，
再往下），块内的 m * m 个图块逐行排列（m = 2 时：左上、右上、左下、右下）。这种“合并块顺序”让合并器之后
合成一个词元的 4 个图块连在一起。
一行的数值：先按通道，再按帧，再按像素行、像素列，即展平的 (C, T, P, P)，与图块嵌入的 Conv3d 权重
(out, C, T, P, P) 的布局相同。
检查方式：完全相同（atol = rtol = 0），数值只是搬动位置。不要修改输入。
已知错误会被指出：光栅顺序（一行一行的图块）、一行里帧在通道之前、通道在后、块内的图块按列排、合并块按列优先排、
帧分组成 (T, t)、图块内的行和列转置、gh 和 gw 互换。

Check: python practice/judge.py 241
"""
import torch


def patchify(frames, patch_size, temporal_patch_size, merge_size):
    raise NotImplementedError
