"""Exercise 240 · Resize to multiples of 32 within the pixel bounds (easy; no PyTorch needed)

smart_resize(height, width, factor, min_pixels, max_pixels) -> (h, w): the size an image is resized
to before the vision tower cuts it into patches. Both sides must be multiples of factor (patch
16 x merge 2 = 32 for Qwen3.5), the aspect ratio kept as closely as possible, and the pixel count
h * w within [min_pixels, max_pixels] (Qwen3.5: 65,536 to 16,777,216, 256 x 256 to 4096 x 4096).
  1. Round each side to the nearest multiple: h_bar = round(height / factor) * factor, w_bar alike.
  2. If h_bar * w_bar > max_pixels: divide both sides by beta, beta = sqrt(height * width / max_pixels)
     (height / beta / factor, not height * (1 / beta) / factor: that rounds once more), and round DOWN
     to a multiple (math.floor), each side at least factor (this max(factor, ...) is step 2's only).
  3. Else if h_bar * w_bar < min_pixels: scale both by beta = sqrt(min_pixels / (height * width)) and round
     UP to a multiple (math.ceil).
Round down or up, not to nearest, beyond a bound: to nearest could land on the wrong side of it.
The bounds are tested on the rounded sizes h_bar * w_bar; a size exactly on a bound is within it (> and
<, not >= and <=). Use Python's round (as the reference and transformers do): an exact half goes to the
even neighbour, round(10.5) = 10, not 11.
Return a tuple of two ints, height first. The inputs have an aspect ratio of at most 200.

Checked: exactly (both ints). Known mistakes are named: rounding to nearest at the bounds, floor
and ceil swapped, the bounds tested on height * width, a size on a bound rescaled, 1 / beta
multiplied, a side left at 0 (no max(factor, ...)), max(factor, ...) in step 1, (width, height)
returned, the first step truncating, or rounding halves up.

练习 240 · 缩放到 32 的倍数，并留在像素界限之内（简单；不需要 PyTorch）

smart_resize(height, width, factor, min_pixels, max_pixels) -> (h, w)：图像在视觉塔把它切成图块之前
要缩放到的尺寸。两条边都必须是 factor 的倍数（Qwen3.5 是 patch 16 x merge 2 = 32），尽量保持宽高比，
像素数 h * w 在 [min_pixels, max_pixels] 之内（Qwen3.5：65,536 到 16,777,216，即 256 x 256 到 4096 x 4096）。
  1. 把每条边舍入到最近的倍数：h_bar = round(height / factor) * factor，w_bar 同理。
  2. 如果 h_bar * w_bar > max_pixels：两条边都除以 beta，beta = sqrt(height * width / max_pixels)
     （height / beta / factor，而不是 height * (1 / beta) / factor：那样多一次舍入），再向下取整到倍数
     （math.floor），每条边至少为 factor（这个 max(factor, ...) 只属于第 2 步）。
  3. 否则如果 h_bar * w_bar < min_pixels：两条边都乘 beta = sqrt(min_pixels / (height * width))，再向上
     取整到倍数（math.ceil）。
超出界限时要向下或向上取整，而不是舍入到最近：舍入到最近可能落在界限的另一侧。
界限用舍入后的 h_bar * w_bar 检查；正好等于界限的尺寸在界限之内（用 > 和 <，不是 >= 和 <=）。用 Python 的
round（与参考实现和 transformers 相同）：正好一半时取偶数，round(10.5) = 10，不是 11。
返回两个 int 组成的元组，高度在前。输入的宽高比最多为 200。

检查方式：完全相同（两个 int）。已知错误会被指出：在界限处舍入到最近、floor 和 ceil 用反、用 height * width
检查界限、正好在界限上的尺寸被缩放、乘了 1 / beta、有一条边停在 0（没有 max(factor, ...)）、第 1 步就用了
max(factor, ...)、返回了 (width, height)、第一步截断，或者一半时向上舍入。

Check: python practice/judge.py 240
"""
import math


def smart_resize(height, width, factor, min_pixels, max_pixels):
    raise NotImplementedError
