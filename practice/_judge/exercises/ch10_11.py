"""Exercises 240-242 (chapters 10-11): the image's size (smart_resize), its patches in merge-block order,
and the 3D position ids of a prompt with images (242, qwen/rope.py rope_index).

Expected values come from the library (qwen/image.py, qwen/rope.py), which tests/test_image.py and
tests/test_vision_prompt.py check against transformers' Qwen2VLImageProcessorPil and get_rope_index. Inputs: the checkpoint's own image settings (its
preprocessor_config.json: the tiny checkpoint's, or the real Qwen3.5-0.8B's values), plus sizes
and shapes chosen so that each known mistake changes the result.
"""
import math

from practice._judge.exercises import Case, Diagnosis, Exercise, Tol


def _torch():
    import torch
    return torch


# ------------------------------------------------------------------------------------------ 240

REAL = (32, 65536, 16777216)                      # Qwen3.5-0.8B: factor 16 x 2, 256 x 256 .. 4096 x 4096 pixels
TINY = (8, 1024, 9216)                            # the tiny checkpoint: factor 4 x 2, 32 x 32 .. 96 x 96 pixels


def smart_resize_expected(height, width, factor, min_pixels, max_pixels):
    from qwen.image import smart_resize
    return smart_resize(height, width, factor, min_pixels, max_pixels)


def _half_up(x):
    """Rounding with halves up (floor(x + 0.5)): Python's round sends an exact half to the even neighbour."""
    return math.floor(x + 0.5)


def _resize_mistake(first=round, down=math.floor, up=math.ceil, at_least_factor=True, bounds_on="rounded",
                    swapped=False, inclusive=False, inverse_beta=False, floor_first=False):
    """smart_resize with one part changed: the first rounding, the rounding at each bound, the
    max(factor, ...) floor, which sizes the bounds are tested on, the order of the result, a size on
    a bound counted as beyond it, 1 / beta multiplied instead of beta divided, max(factor, ...) in
    the first step."""
    def resize(height, width, factor, min_pixels, max_pixels):
        h, w = first(height / factor) * factor, first(width / factor) * factor
        if floor_first:
            h, w = max(factor, h), max(factor, w)
        pixels = h * w if bounds_on == "rounded" else height * width
        if pixels > max_pixels or inclusive and pixels == max_pixels:
            beta = math.sqrt(height * width / max_pixels)
            if inverse_beta:
                h, w = down(height * (1 / beta) / factor) * factor, down(width * (1 / beta) / factor) * factor
            else:
                h, w = down(height / beta / factor) * factor, down(width / beta / factor) * factor
            if at_least_factor:
                h, w = max(factor, h), max(factor, w)
        elif pixels < min_pixels or inclusive and pixels == min_pixels:
            beta = math.sqrt(min_pixels / (height * width))
            h, w = up(height * beta / factor) * factor, up(width * beta / factor) * factor
        return (w, h) if swapped else (h, w)
    return resize


def _bounds(args):
    """A case's bounds as its title says them: factor, min_pixels .. max_pixels."""
    factor, low, high = args[2:]
    return f"factor {factor}, {low:,} .. {high:,} pixels"


def cases_240(ctx):
    about = ("round each side to the nearest multiple of factor; if the rounded sizes hold more than max_pixels, scale "
             "both by the same ratio and round down; if fewer than min_pixels, scale and round up",
             "先把每条边舍入到最近的 factor 倍数；如果舍入后的像素数超过 max_pixels，两条边按同一比例缩小并向下取整；"
             "少于 min_pixels 时按比例放大并向上取整")
    bound = ("beyond a bound, floor (max_pixels) or ceil (min_pixels), not round: rounding to nearest can land on the "
             "wrong side of the bound",
             "超出界限时用 floor（max_pixels）或 ceil（min_pixels），而不是四舍五入：舍入到最近可能落在界限的另一侧")
    rounded = ("test the bounds on the rounded sizes h_bar * w_bar, not on height * width: rounding alone can cross a "
               "bound", "界限要用舍入后的 h_bar * w_bar 检查，而不是 height * width：仅仅舍入就可能越过界限")
    on_bound = ("a rounded size exactly on a bound is within it: rescale only when h_bar * w_bar > max_pixels or "
                "< min_pixels", "舍入后的像素数正好等于界限时就在界限之内：只有 h_bar * w_bar > max_pixels 或 "
                "< min_pixels 时才缩放")

    def case(name, args, why=about):
        en, zh = name
        b = _bounds(args)
        return Case("smart_resize", (f"{en} ({b})", f"{zh}（{b}）"), args, smart_resize_expected(*args), about=why)

    return [
        case(("448 x 448: already multiples of 32", "448 x 448：已经是 32 的倍数"), (448, 448) + REAL),
        case(("height 3000, width 4000: rounded to nearest", "高 3000、宽 4000：舍入到最近"), (3000, 4000) + REAL),
        case(("height 336 = 10.5 x 32, width 448: an exact half goes to the even multiple, as Python's round does",
              "高 336 = 10.5 x 32、宽 448：正好一半时取偶数倍，和 Python 的 round 一样"), (336, 448) + REAL,
             ("step 1 uses Python's round, which sends an exact half to the even neighbour: round(10.5) = 10, "
              "not 11", "第 1 步用 Python 的 round，正好一半时取偶数：round(10.5) = 10，不是 11")),
        case(("height 47, width 33: under min_pixels, scaled up", "高 47、宽 33：少于 min_pixels，放大"),
             (47, 33) + REAL, bound),
        case(("height 50, width 70: under min_pixels, scaled up", "高 50、宽 70：少于 min_pixels，放大"),
             (50, 70) + REAL, bound),
        case(("height 4000, width 3000: over max_pixels, scaled down", "高 4000、宽 3000：超过 max_pixels，缩小"),
             (4000, 3000) + TINY, bound),
        case(("4237 x 4237: over max_pixels, each side divided by beta", "4237 x 4237：超过 max_pixels，每条边除以 beta"),
             (4237, 4237) + REAL,
             ("divide by beta (side / beta / factor): multiplying by 1 / beta rounds once more, and for this size "
              "lands just under 4096 / 32 = 128, which the floor turns into 127",
              "除以 beta（side / beta / factor）：乘以 1 / beta 会多舍入一次，这个尺寸下会落在 4096 / 32 = 128 "
              "的下面一点，floor 之后变成 127")),
        case(("height 6000, width 40 (1 : 150): the thin side stays one factor wide",
              "高 6000、宽 40（1 : 150）：窄边至少保留一个 factor"), (6000, 40) + TINY,
             ("after the floor a side can be 0: max(factor, ...) keeps it one factor wide",
              "向下取整后一条边可能变成 0：max(factor, ...) 让它至少有一个 factor 宽")),
        case(("height 15, width 3000 (1 : 200): the thin side rounds to 0 in step 1, and 0 pixels are under "
              "min_pixels", "高 15、宽 3000（1 : 200）：第 1 步窄边舍入为 0，0 个像素少于 min_pixels"), (15, 3000) + REAL,
             ("max(factor, ...) belongs to step 2 only: in step 1 the thin side rounds to 0, so the image is under "
              "min_pixels and is scaled up", "max(factor, ...) 只属于第 2 步：第 1 步里窄边舍入为 0，所以图像少于 "
              "min_pixels，要放大")),
        case(("height 3601, width 4655: within max_pixels, but its rounded sizes are not",
              "高 3601、宽 4655：本身不超过 max_pixels，但舍入后超过"), (3601, 4655) + REAL, rounded),
        case(("height 142, width 466: at least min_pixels, but its rounded sizes are not",
              "高 142、宽 466：本身不少于 min_pixels，但舍入后少于"), (142, 466) + REAL, rounded),
        case(("height 92, width 93: rounded to 96 x 96 = max_pixels exactly, so kept",
              "高 92、宽 93：舍入为 96 x 96，正好等于 max_pixels，所以保留"), (92, 93) + TINY, on_bound),
        case(("height 33, width 34: rounded to 32 x 32 = min_pixels exactly, so kept",
              "高 33、宽 34：舍入为 32 x 32，正好等于 min_pixels，所以保留"), (33, 34) + TINY, on_bound),
        case(("height 1000, width 200", "高 1000、宽 200"), (1000, 200) + TINY),
    ]


def _only_240(name):
    """The result is this mistake's, and no other known mistake gives the same one on this case: some
    cases cannot tell two mistakes apart (a size that rounding alone pushes over max_pixels gives the same
    result rounded to nearest or up at the bound), and there naming one of them may name the wrong one."""
    def test(case, got):
        mine = MISTAKES_240[name](*case.args)
        if not isinstance(got, (tuple, list)) or tuple(got) != mine:
            return False
        return all(other == name or m(*case.args) != mine for other, m in MISTAKES_240.items())
    return test


DIAGNOSES_240 = [
    Diagnosis("swapped", "smart_resize",
              ("looks like (width, height) was returned: return (height, width), in the order of the arguments (Pillow's "
               "resize takes (width, height), smart_resize does not)",
               "看起来返回的是 (width, height)：要按参数的顺序返回 (height, width)（Pillow 的 resize 接受 (width, height)，"
               "smart_resize 不是）"),
              test=_only_240("swapped")),
    Diagnosis("round_at_bounds", "smart_resize",
              ("looks like the sides were rounded to nearest after scaling: beyond max_pixels round down (math.floor), "
               "below min_pixels round up (math.ceil), so that the result stays within the bound",
               "看起来缩放之后仍然舍入到最近：超过 max_pixels 时向下取整（math.floor），少于 min_pixels 时向上取整"
               "（math.ceil），这样结果才会留在界限之内"),
              test=_only_240("round_at_bounds"), hint=1),
    Diagnosis("floor_ceil_swapped", "smart_resize",
              ("looks like floor and ceil were swapped between the bounds: beyond max_pixels round DOWN (math.floor), "
               "so the result stays under it; below min_pixels round UP (math.ceil), so it reaches it",
               "看起来两个界限的 floor 和 ceil 用反了：超过 max_pixels 时向下取整（math.floor），结果才不会超过它；"
               "少于 min_pixels 时向上取整（math.ceil），结果才能达到它"),
              test=_only_240("floor_ceil_swapped"), hint=1),
    Diagnosis("bounds_on_original", "smart_resize",
              ("looks like the bounds were tested on height * width: test them on the rounded sizes h_bar * w_bar, "
               "since the rounding alone can cross a bound",
               "看起来界限是用 height * width 检查的：要用舍入后的 h_bar * w_bar 检查，因为仅仅舍入就可能越过界限"),
              test=_only_240("bounds_on_original"), hint=1),
    Diagnosis("bound_inclusive", "smart_resize",
              ("looks like a size exactly on a bound was rescaled (>= or <=): h_bar * w_bar equal to max_pixels or "
               "min_pixels is within the bounds; rescale only when it is > max_pixels or < min_pixels",
               "看起来正好等于界限的尺寸也被缩放了（用了 >= 或 <=）：h_bar * w_bar 等于 max_pixels 或 min_pixels "
               "时在界限之内；只有 > max_pixels 或 < min_pixels 时才缩放"),
              test=_only_240("bound_inclusive"), hint=1),
    Diagnosis("inverse_beta", "smart_resize",
              ("looks like each side was multiplied by 1 / beta: divide by beta, side / beta / factor, as the "
               "statement says; 1 / beta is rounded once more, and a side that should be exactly a multiple lands "
               "just under it, which the floor takes one factor down",
               "看起来每条边乘的是 1 / beta：要按题目说的除以 beta，side / beta / factor；1 / beta 多了一次舍入，"
               "本应正好是倍数的边会落在它下面一点，floor 就少了一个 factor"),
              test=_only_240("inverse_beta"), hint=1),
    Diagnosis("no_factor_floor", "smart_resize",
              ("looks like a side became 0: after the floor, keep each side at least factor (max(factor, ...))",
               "看起来有一条边变成了 0：向下取整之后，每条边至少要有 factor（max(factor, ...)）"),
              test=_only_240("no_factor_floor"), hint=1),
    Diagnosis("factor_floor_first", "smart_resize",
              ("looks like max(factor, ...) was applied in step 1: it belongs to step 2 only (after the floor); in "
               "step 1 a side under factor / 2 rounds to 0, the image counts 0 pixels and is scaled up",
               "看起来第 1 步就用了 max(factor, ...)：它只属于第 2 步（floor 之后）；第 1 步里不到 factor / 2 的边舍入为 0，"
               "图像算作 0 个像素，要放大"),
              test=_only_240("factor_floor_first"), hint=0),
    Diagnosis("truncates", "smart_resize",
              ("looks like the first step truncated (int() or //) instead of rounding to the nearest multiple: "
               "round(height / factor) * factor",
               "看起来第一步是截断（int() 或 //），而不是舍入到最近的倍数：round(height / factor) * factor"),
              test=_only_240("truncates"), hint=0),
    Diagnosis("round_half_up", "smart_resize",
              ("looks like an exact half was rounded up (floor(x + 0.5), or decimal's ROUND_HALF_UP): use Python's "
               "round, which sends an exact half to the even neighbour, as transformers' smart_resize does "
               "(round(10.5) = 10)",
               "看起来正好一半时向上舍入了（floor(x + 0.5)，或 decimal 的 ROUND_HALF_UP）：要用 Python 的 round，"
               "它把正好一半的数舍入到偶数，和 transformers 的 smart_resize 一样（round(10.5) = 10）"),
              test=_only_240("round_half_up"), hint=0),
]

MISTAKES_240 = {                                 # each known mistake's smart_resize
    "swapped": _resize_mistake(swapped=True),
    "round_at_bounds": _resize_mistake(down=round, up=round),
    "floor_ceil_swapped": _resize_mistake(down=math.ceil, up=math.floor),
    "bounds_on_original": _resize_mistake(bounds_on="original"),
    "bound_inclusive": _resize_mistake(inclusive=True),
    "inverse_beta": _resize_mistake(inverse_beta=True),
    "no_factor_floor": _resize_mistake(at_least_factor=False),
    "factor_floor_first": _resize_mistake(floor_first=True),
    "truncates": _resize_mistake(first=math.floor),
    "round_half_up": _resize_mistake(first=_half_up),
}


# ------------------------------------------------------------------------------------------ 241

def patchify_expected(frames, patch_size, temporal_patch_size, merge_size):
    from qwen.image import patchify
    return patchify(frames, patch_size, temporal_patch_size, merge_size)


def _patchify_mistake(rows, values, frames_by="tT", grid="hw"):
    """patchify with the rows and each row's values ordered by `rows` and `values`, names from
    t (time group), bh / bw (block row / column), mh / mw (row / column in the block), C, T, P, Q;
    frames_by "Tt": the frames split as (T, t) instead of (t, T); grid "wh": the patch grid's
    counts gh and gw swapped in the reshape."""
    axes = {"t": 0, "T": 1, "C": 2, "bh": 3, "mh": 4, "P": 5, "bw": 6, "mw": 7, "Q": 8}
    if frames_by == "Tt":
        axes = {**axes, "T": 0, "t": 1}

    def mistaken(frames, patch_size, temporal_patch_size, merge_size):
        F, C, H, W = frames.shape
        T, P, m = temporal_patch_size, patch_size, merge_size
        gh, gw = (H // P, W // P) if grid == "hw" else (W // P, H // P)
        first = (F // T, T) if frames_by == "tT" else (T, F // T)
        x = frames.reshape(*first, C, gh // m, m, P, gw // m, m, P)
        x = x.permute(*[axes[a] for a in rows + values])
        return x.reshape(F // T * (H // P) * (W // P), C * T * P * P)
    return mistaken


RIGHT_ROWS, RIGHT_VALUES = ["t", "bh", "bw", "mh", "mw"], ["C", "T", "P", "Q"]


def _picture_frames(settings):
    """A drawn picture through the library's own steps: resize, normalize, repeat to T frames."""
    from PIL import Image, ImageDraw

    from qwen.image import repeat_frames, resize_and_normalize
    image = Image.new("RGB", (120, 80), (250, 240, 220))
    draw = ImageDraw.Draw(image)
    draw.ellipse((10, 10, 60, 60), fill=(200, 30, 30))
    draw.rectangle((70, 20, 110, 70), fill=(30, 90, 200))
    return repeat_frames(resize_and_normalize(image, settings), settings.temporal_patch_size).contiguous()


def cases_241(ctx):
    torch = _torch()
    from qwen.image import REAL_SETTINGS, image_settings
    s = image_settings(ctx.path)
    g = ctx.gen(241)
    still = torch.randn(3, 32, 48, generator=g)
    tiny_still = still.unsqueeze(0).expand(2, 3, 32, 48).contiguous()                  # one image as 2 frames
    real_still = torch.randn(1, 3, 64, 96, generator=g).expand(2, 3, 64, 96).contiguous()
    moving = torch.randn(2, 3, 16, 24, generator=g)                                    # two different frames
    clip = torch.randn(4, 3, 16, 8, generator=g)                                       # 4 frames: t = 2
    about = ("rows: block by block (merge x merge patches), inside a block row by row; values of a row: channel, "
             "frame, pixel row, pixel column",
             "行的顺序：一个合并块接一个合并块（merge x merge 个图块），块内逐行；每行的数值：通道、帧、像素行、像素列")
    exact = Tol(0, 0)

    def case(name, args, why=about):
        return Case("patchify", name, args, patchify_expected(*args), exact, about=why)

    return [
        case(("one image as 2 frames (2, 3, 32, 48), patch 4, merge 2", "一张图像作为 2 帧 (2, 3, 32, 48)，patch 4，merge 2"),
             (tiny_still, 4, 2, 2)),
        case(("Qwen3.5's geometry: frames (2, 3, 64, 96), patch 16, merge 2: rows of 1536",
              "Qwen3.5 的几何：帧 (2, 3, 64, 96)，patch 16，merge 2：每行 1536 个数"),
             (real_still, REAL_SETTINGS.patch_size, 2, 2)),
        case(("two different frames (2, 3, 16, 24): each row holds channel, then frame",
              "两帧不同的画面 (2, 3, 16, 24)：每行先按通道，再按帧"), (moving, 4, 2, 2),
             ("a row is (C, T, P, P) flattened: channel 0's two frames first, then channel 1's",
              "一行是展平的 (C, T, P, P)：先是通道 0 的两帧，再是通道 1 的")),
        case(("4 frames (4, 3, 16, 8): two groups of 2 frames, one after the other",
              "4 帧 (4, 3, 16, 8)：两组、每组 2 帧，一组接一组"), (clip, 4, 2, 2),
             ("t = frames / temporal_patch_size groups: all rows of group 0, then of group 1",
              "t = 帧数 / temporal_patch_size 组：先是第 0 组的所有行，再是第 1 组的")),
        case((f"a drawn 120 x 80 picture through the {ctx.label} checkpoint's settings",
              f"一张画出来的 120 x 80 图片，用{ctx.checkpoint_zh}的设置"),
             (_picture_frames(s), s.patch_size, s.temporal_patch_size, s.merge_size)),
    ]


DIAGNOSES_241 = [
    Diagnosis("raster_order", "patchify",
              ("looks like the rows are in raster order (row by row of patches): the 4 patches of each merge x merge "
               "block must come one after another, so that the merger can join them with a reshape",
               "看起来行是按光栅顺序（一行一行的图块）排的：每个 merge x merge 合并块的 4 个图块要连在一起，"
               "这样合并器才能用 reshape 把它们合起来"),
              mistake=_patchify_mistake(["t", "bh", "mh", "bw", "mw"], ["C", "T", "P", "Q"]), hint=1),
    Diagnosis("frame_before_channel", "patchify",
              ("looks like each row holds frame, then channel (T, C, P, P): the Conv3d's weight is (out, C, T, P, P), "
               "so a row is channel, then frame",
               "看起来每行先按帧、再按通道 (T, C, P, P)：Conv3d 的权重是 (out, C, T, P, P)，所以一行要先按通道、再按帧"),
              mistake=_patchify_mistake(["t", "bh", "bw", "mh", "mw"], ["T", "C", "P", "Q"]), hint=1),
    Diagnosis("channels_last", "patchify",
              ("looks like the channel is the last value of each pixel (channels last, as Pillow and numpy images are): "
               "the channel comes first in a row (C, T, P, P)",
               "看起来通道被放在每个像素的最后（通道在后，像 Pillow 和 numpy 的图像那样）：一行里通道在最前 (C, T, P, P)"),
              mistake=_patchify_mistake(["t", "bh", "bw", "mh", "mw"], ["T", "P", "Q", "C"]), hint=1),
    Diagnosis("block_by_columns", "patchify",
              ("looks like the patches inside a block go column by column: inside a merge x merge block they go row "
               "by row (top-left, top-right, bottom-left, bottom-right)",
               "看起来合并块内的图块是按列排的：合并块内要逐行排（左上、右上、左下、右下）"),
              mistake=_patchify_mistake(["t", "bh", "bw", "mw", "mh"], ["C", "T", "P", "Q"]), hint=1),
    Diagnosis("blocks_column_major", "patchify",
              ("looks like the merge blocks go column by column (block column before block row): the blocks are in "
               "raster order, left to right, then down: rows in the order (t, block row, block column, ...)",
               "看起来合并块是按列排的（块列在块行之前）：合并块按光栅顺序排，先从左到右，再往下：行的顺序是 "
               "(t, 块行, 块列, ...)"),
              mistake=_patchify_mistake(["t", "bw", "bh", "mh", "mw"], RIGHT_VALUES), hint=1),
    Diagnosis("frames_as_T_t", "patchify",
              ("looks like the frames were split as (T, t): frames.reshape(T, t, ...) puts frames 0 and t in one "
               "group; a group is T consecutive frames, frames.reshape(t, T, ...)",
               "看起来帧被拆成了 (T, t)：frames.reshape(T, t, ...) 把第 0 帧和第 t 帧放进同一组；一组是 T 个连续的帧，"
               "frames.reshape(t, T, ...)"),
              mistake=_patchify_mistake(RIGHT_ROWS, RIGHT_VALUES, frames_by="Tt"), hint=0),
    Diagnosis("patch_transposed", "patchify",
              ("looks like each patch's pixels are transposed (column, then row): inside a patch the values go row by "
               "row, (C, T, P, P) with the pixel row before the pixel column",
               "看起来每个图块的像素转置了（先列后行）：图块内的数值要逐行排列，(C, T, P, P) 里像素行在像素列之前"),
              mistake=_patchify_mistake(RIGHT_ROWS, ["C", "T", "Q", "P"]), hint=1),
    Diagnosis("grid_swapped", "patchify",
              ("looks like gh and gw were swapped in the reshape: H holds gh = H // P patch rows and W holds gw = W // P "
               "columns, frames.reshape(t, T, C, gh // m, m, P, gw // m, m, P); a square image hides it",
               "看起来 reshape 里 gh 和 gw 互换了：H 方向有 gh = H // P 行图块，W 方向有 gw = W // P 列，"
               "frames.reshape(t, T, C, gh // m, m, P, gw // m, m, P)；正方形图像看不出来"),
              mistake=_patchify_mistake(RIGHT_ROWS, RIGHT_VALUES, grid="wh"), hint=0),
]


# ------------------------------------------------------------------------------------------ 242

def position_ids_expected(ids, grid_thw, image_token_id, merge_size):
    """qwen/rope.py rope_index on one prompt, with a config holding these two numbers."""
    from qwen.rope import rope_index
    return rope_index(ids, grid_thw, _ImageConfig(image_token_id, merge_size))[:, 0]    # (3, seq)


class _ImageConfig:
    """The two numbers rope_index reads from a Config (cfg.image_tokens(), the image token id)."""

    def __init__(self, image_token_id, merge_size):
        self.raw = {"image_token_id": image_token_id, "vision_config": {"spatial_merge_size": merge_size}}
        self._pair = (image_token_id, merge_size)

    def image_tokens(self):
        return self._pair


def _positions_mistake(advance="max", time_from_p=True, swap=False, as_text=False, runs=False):
    """The positions with one rule changed: how far the text after an image moves on ("max", "n":
    the image's token count, "max+1", "largest+1": the image's largest position, time included, + 1,
    "unmerged": max(h, w) before the merge), the time stream's start, rows and columns, the image
    numbered like text, or images found as runs of image tokens (two side by side read as one)."""
    def mistaken(ids, grid_thw, image_token_id, merge_size):
        torch = _torch()
        if as_text:
            return torch.arange(len(ids)).expand(3, len(ids)).clone()
        out, p, i, images, tokens = [], 0, 0, iter(grid_thw.tolist()), ids.tolist()
        while i < len(tokens):
            if tokens[i] != image_token_id:
                out.append(torch.tensor([[p], [p], [p]]))
                p, i = p + 1, i + 1
                continue
            t, h0, w0 = next(images)
            h, w = h0 // merge_size, w0 // merge_size
            a, r, c = torch.meshgrid(torch.arange(t), torch.arange(h), torch.arange(w), indexing="ij")
            grid = torch.stack([a, c, r] if swap else [a, r, c]).reshape(3, -1) + p
            if not time_from_p:
                grid[0] -= p
            out.append(grid)
            p += {"max": max(h, w), "n": t * h * w, "max+1": max(h, w) + 1, "largest+1": max(t, h, w),
                  "unmerged": max(h0, w0)}[advance]
            if runs:                                   # the whole run of image tokens taken as this image
                while i < len(tokens) and tokens[i] == image_token_id:
                    i += 1
            else:
                i += t * h * w
        return torch.cat(out, dim=1)
    return mistaken


def cases_242(ctx):
    torch = _torch()
    image_id, merge = ctx.cfg.image_tokens()                   # from the checkpoint's config.json
    g = ctx.gen(242)

    def text(n):
        return torch.randint(0, 248044, (n,), generator=g)    # ordinary tokens (the special ones start at 248044)

    def prompt(*parts):
        """ids (seq,) and grid_thw (images, 3): an int n is n text tokens, a tuple (t, h, w) an image."""
        ids, grids = [], []
        for part in parts:
            if isinstance(part, tuple):
                t, h, w = part
                ids.append(torch.full((t * (h // merge) * (w // merge),), image_id))
                grids.append(part)
            else:
                ids.append(text(part))
        return torch.cat(ids), torch.tensor(grids, dtype=torch.int64).reshape(-1, 3)

    def case(name, parts, about):
        ids, grid = prompt(*parts)
        args = (ids, grid, image_id, merge)
        return Case("position_ids", name, args, position_ids_expected(*args), Tol(0, 0), about=about)

    side = 448 // 16                                           # 448 x 448 pixels: 28 x 28 patches of 16
    after = ("the text after an image continues at p + max(h, w) // merge_size, as transformers' get_rope_index "
             "computes it (the image's time positions do not count)",
             "图像之后的文本从 p + max(h, w) // merge_size 接着排，和 transformers 的 get_rope_index 一样（图像的时间位置"
             "不计入）")
    grid = ("an image's tokens: (p + time, p + row, p + column) of the merged grid, row by row",
            "图像的词元：合并后网格的 (p + 时间, p + 行, p + 列)，逐行排列")
    m2 = merge * 2
    return [
        case(("text, a 448 x 448 image (28 x 28 patches: 196 tokens), text",
              "文本、一张 448 x 448 的图像（28 x 28 个图块：196 个词元）、文本"), (5, (1, side, side), 7), after),
        case(("two images of different shapes, text around and between them", "两张形状不同的图像，前后和中间都有文本"),
             (3, (1, 3 * merge, 4 * merge), 2, (1, 3 * merge, merge), 4), grid),
        case(("an image first (a wide one), then text", "图像在最前（一张宽图），然后是文本"),
             ((1, merge, 4 * merge), 6), after),
        case(("an image last (a tall one), after text", "图像在最后（一张高图），前面是文本"), (4, (1, 3 * merge, merge)), grid),
        case(("two frame groups (t = 2): time p and p + 1", "两组帧（t = 2）：时间为 p 和 p + 1"),
             (2, (2, m2, m2), 3), grid),
        case(("5 frame groups of a 1 x 2 merged grid, then text: p moves on by max(h, w) // merge_size = 2, not "
              "past the time positions", "5 组帧、合并后 1 x 2 的网格，然后是文本：p 增加 max(h, w) // merge_size = 2，"
              "而不是越过时间位置"), (2, (5, merge, m2), 4), after),
        case(("two images side by side, no token between them", "两张图像紧挨着，中间没有词元"),
             (3, (1, m2, m2), (1, merge, 3 * merge), 2),
             ("image i is its own t * (h // merge_size) * (w // merge_size) tokens, counted from grid_thw: two images "
              "may stand side by side, so a run of image tokens is not one image",
              "第 i 张图像是它自己的 t * (h // merge_size) * (w // merge_size) 个词元，由 grid_thw 算出：两张图像可能"
              "紧挨着，所以一串连续的图像词元不一定是一张图像")),
        case(("text only: three equal streams, 0, 1, 2, ...", "只有文本：三路相等，0、1、2……"), (9,),
             ("text tokens get (p, p, p) and p moves on by one", "文本词元得到 (p, p, p)，p 每次加一")),
    ]


DIAGNOSES_242 = [
    Diagnosis("plus_n_tokens", "position_ids",
              ("looks like the text after an image continues at + its number of tokens: it continues at "
               "p + max(h, w) // merge_size (14 for a 448 x 448 image, not 196)",
               "看起来图像之后的文本从 + 图像的词元数处接着排：应当从 p + max(h, w) // merge_size 接着排"
               "（448 x 448 的图像是 14，不是 196）"),
              mistake=_positions_mistake(advance="n"), hint=1),
    Diagnosis("largest_plus_one", "position_ids",
              ("looks like the text after an image continues at the image's largest position + 1, its time positions "
               "included: transformers' get_rope_index moves p on by max(h, w) // merge_size whatever t is (with t "
               "frame groups over a small grid, the time positions run past it)",
               "看起来图像之后的文本从图像的最大位置 + 1 接着排，把时间位置也算进去了：transformers 的 get_rope_index "
               "不管 t 是多少，都让 p 增加 max(h, w) // merge_size（帧组多、网格小时，时间位置会超过它）"),
              mistake=_positions_mistake(advance="largest+1"), hint=1),
    Diagnosis("unmerged_advance", "position_ids",
              ("looks like p moved on by max(h, w) before the merge: the image spans its merged grid, so p += "
               "max(h, w) // merge_size (grid_thw holds patches, merge_size x merge_size of them make one token)",
               "看起来 p 增加的是合并之前的 max(h, w)：图像占的是合并后的网格，所以 p += max(h, w) // merge_size"
               "（grid_thw 里是图块数，merge_size x merge_size 个图块合成一个词元）"),
              mistake=_positions_mistake(advance="unmerged"), hint=1),
    Diagnosis("runs_as_images", "position_ids",
              ("looks like each run of image tokens was taken as one image: two images side by side merge into one. "
               "Count image i's tokens from its grid, t * (h // merge_size) * (w // merge_size), and the next image "
               "starts right after them",
               "看起来每一串连续的图像词元被当成了一张图像：紧挨着的两张图像合成了一张。要按网格数出第 i 张图像的词元数，"
               "t * (h // merge_size) * (w // merge_size)，下一张图像紧接着开始"),
              mistake=_positions_mistake(runs=True), hint=0),
    Diagnosis("one_past", "position_ids",
              ("looks like the text after an image starts one position too far: the image's last row and column are "
               "at p + max(h, w) // merge_size - 1, so the next text token is at p + max(h, w) // merge_size",
               "看起来图像之后的文本多跳了一个位置：图像最后的行和列在 p + max(h, w) // merge_size - 1，所以下一个文本词元"
               "在 p + max(h, w) // merge_size"),
              mistake=_positions_mistake(advance="max+1"), hint=1),
    Diagnosis("image_as_text", "position_ids",
              ("looks like the image's tokens were numbered like text (one position each, three equal streams): "
               "they stand on a grid, (p + time, p + row, p + column)",
               "看起来图像的词元像文本一样编号了（每个一个位置，三路相等）：它们排在网格上，(p + 时间, p + 行, p + 列)"),
              mistake=_positions_mistake(as_text=True), hint=0),
    Diagnosis("rows_cols_swapped", "position_ids",
              ("looks like rows and columns are swapped: the height stream (row 1) gets the token's row, the width "
               "stream (row 2) its column",
               "看起来行和列互换了：高这一路（第 1 行）是词元所在的行，宽这一路（第 2 行）是它所在的列"),
              mistake=_positions_mistake(swap=True), hint=0),
    Diagnosis("time_not_offset", "position_ids",
              ("looks like the image's time stream starts at 0: like the other two, it starts at p (p + time)",
               "看起来图像的时间一路从 0 开始：它和另外两路一样从 p 开始（p + 时间）"),
              mistake=_positions_mistake(time_from_p=False), hint=0),
]


# ------------------------------------------------------------------------------------------ registry

# The chapter that teaches each exercise (the list and the page show it).
TAUGHT_IN = {"240": 10, "241": 10, "242": 11}

EXERCISES = [
    Exercise("240", "smart_resize", ("Resize to multiples of 32 within the pixel bounds",
                                     "缩放到 32 的倍数，并留在像素界限之内"), "easy", False, ("smart_resize",),
             [("First round each side to the nearest multiple: h_bar = round(height / factor) * factor, the same for "
               "the width.",
               "先把每条边舍入到最近的倍数：h_bar = round(height / factor) * factor，宽度同理。"),
              ("If h_bar * w_bar > max_pixels: beta = sqrt(height * width / max_pixels), then each side is "
               "max(factor, floor(side / beta / factor) * factor). If h_bar * w_bar < min_pixels: beta = "
               "sqrt(min_pixels / (height * width)), each side ceil(side * beta / factor) * factor. A size exactly on a "
               "bound is within it; divide by beta, do not multiply by 1 / beta.",
               "如果 h_bar * w_bar > max_pixels：beta = sqrt(height * width / max_pixels)，每条边是 "
               "max(factor, floor(side / beta / factor) * factor)。如果 h_bar * w_bar < min_pixels：beta = "
               "sqrt(min_pixels / (height * width))，每条边是 ceil(side * beta / factor) * factor。正好等于界限的尺寸在界限之内；"
               "要除以 beta，不要乘 1 / beta。"),
              ("Return the tuple (height, width) of two ints (math.floor and math.ceil return ints).",
               "返回两个 int 组成的元组 (height, width)（math.floor 和 math.ceil 返回的是 int）。")],
             cases_240, DIAGNOSES_240,
             {"240_round_at_bounds.py": "round_at_bounds", "240_bounds_on_original.py": "bounds_on_original",
              "240_no_factor_floor.py": "no_factor_floor", "240_swapped.py": "swapped",
              "240_truncates.py": "truncates", "240_round_half_up.py": "round_half_up",
              "240_bound_inclusive.py": "bound_inclusive", "240_inverse_beta.py": "inverse_beta",
              "240_factor_floor_first.py": "factor_floor_first", "240_floor_ceil_swapped.py": "floor_ceil_swapped"},
             uses_model=False),
    Exercise("241", "patchify", ("Image patches in merge-block order", "按合并块顺序切出图块"), "medium", True,
             ("patchify",),
             [("Name every axis with one reshape: frames.reshape(t, T, C, gh // m, m, P, gw // m, m, P), where "
               "gh = H // P, gw = W // P and t = F // T.",
               "用一次 reshape 给每个轴命名：frames.reshape(t, T, C, gh // m, m, P, gw // m, m, P)，其中 "
               "gh = H // P、gw = W // P、t = F // T。"),
              ("Rows in the order (t, block row, block column, row in block, column in block); the values of a row in "
               "the order (C, T, P, P): permute(0, 3, 6, 4, 7, 2, 1, 5, 8).",
               "行的顺序是 (t, 块行, 块列, 块内行, 块内列)；每行数值的顺序是 (C, T, P, P)：permute(0, 3, 6, 4, 7, 2, 1, 5, 8)。"),
              ("Then reshape(t * gh * gw, C * T * P * P): one row per patch.",
               "然后 reshape(t * gh * gw, C * T * P * P)：每个图块一行。")],
             cases_241, DIAGNOSES_241,
             {"241_raster_order.py": "raster_order", "241_frame_before_channel.py": "frame_before_channel",
              "241_channels_last.py": "channels_last", "241_block_by_columns.py": "block_by_columns",
              "241_blocks_column_major.py": "blocks_column_major", "241_frames_as_T_t.py": "frames_as_T_t",
              "241_patch_transposed.py": "patch_transposed", "241_grid_swapped.py": "grid_swapped"}),
    Exercise("242", "position_ids", ("The 3D position ids of a prompt with images", "带图像的提示词的三维位置编号"),
             "medium", True, ("position_ids",),
             [("An image's tokens stand on its merged grid (t, h // merge_size, w // merge_size), row-major: the token "
               "at (a, r, c) gets (p + a, p + r, p + c). torch.meshgrid(..., indexing='ij') gives the three.",
               "图像的词元排在合并后的网格 (t, h // merge_size, w // merge_size) 上，行优先：位于 (a, r, c) 的词元得到 "
               "(p + a, p + r, p + c)。torch.meshgrid(..., indexing='ij') 能一次给出这三个。"),
              ("After the image, p moves on by max(h, w) // merge_size (as transformers' get_rope_index computes it, "
               "whatever t is), not by its number of tokens. Count each image's tokens from its grid: two images may "
               "stand side by side.",
               "图像之后，p 增加 max(h, w) // merge_size（和 transformers 的 get_rope_index 一样，与 t 无关），而不是它的"
               "词元数。每张图像的词元数要按它的网格算：两张图像可能紧挨着。"),
              ("Collect the pieces (3, n) and torch.cat them along dimension 1; the result is int64.",
               "把各段 (3, n) 收集起来，沿第 1 维 torch.cat；结果是 int64。")],
             cases_242, DIAGNOSES_242,
             {"242_plus_n_tokens.py": "plus_n_tokens", "242_one_past.py": "one_past",
              "242_image_as_text.py": "image_as_text", "242_rows_cols_swapped.py": "rows_cols_swapped",
              "242_time_not_offset.py": "time_not_offset", "242_largest_plus_one.py": "largest_plus_one",
              "242_unmerged_advance.py": "unmerged_advance", "242_runs_as_images.py": "runs_as_images"}),
]
