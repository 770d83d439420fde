"""Exercise 260 (chapter 13): int8 quantization with an absmax scale per row, and back.

Expected values come from the library (qwen/quant.py quantize_int8 / dequantize_int8, which
tests/test_quant.py checks: every weight within half a step, each row's largest at +-127).
Inputs: rows of the model's own layer-0 gate_proj (the real Qwen3.5-0.8B when it is on disk, else
the built-in tiny checkpoint), in fp32, plus small synthetic weights with an outlier, an all-negative
row, a transposed (non-contiguous) layout and rows of zeros (scale 1, as the library gives them: any
scale gives q = 0, and max|w| / 127 = 0 would divide by zero), so that each known mistake gives a
different answer.
"""
from practice._judge.exercises import Case, Diagnosis, Exercise, Tol

SCALE_TOL = Tol(0, 1e-5)           # relative: the scales are 1e-4 .. 1e-2, where an atol of 1e-5 is 1-10% of them


def _torch():
    import torch
    return torch


def quantize_expected(w):
    from qwen.quant import quantize_int8
    return quantize_int8(w)


def dequantize_expected(q, scale):
    from qwen.quant import dequantize_int8
    return dequantize_int8(q, scale)


def _quantize_mistake(kind):
    def mistake(w):
        torch = _torch()
        w = w.float()
        if kind == "per_tensor_scale":                           # one scale for the whole tensor
            scale = (w.abs().max() / 127).expand(w.shape[0]).clone()
        elif kind == "per_column_scale":                         # amax over dim 0: one scale per input column
            scale = w.abs().amax(dim=0) / 127
            scale = torch.where(scale == 0, torch.ones_like(scale), scale)
            return torch.round(w / scale[None, :]).clamp(-127, 127).to(torch.int8), scale
        elif kind == "unsigned_range":                           # 0..255's span used for a signed range
            scale = w.abs().amax(dim=1) / 255
        else:
            scale = w.abs().amax(dim=1) / 127
        if kind != "zero_scale":                                 # each mistake alone: rows of zeros as the library
            scale = torch.where(scale == 0, torch.ones_like(scale), scale)
        x = w * (127 / w.abs().amax(dim=1))[:, None] if kind == "inverse_scale" else w / scale[:, None]
        if kind == "inverse_scale":                              # a row of zeros: 0 * inf is NaN; its codes are 0
            x = torch.where(scale[:, None] == 1, w / scale[:, None], x)
        if kind == "truncates":                                  # .to(torch.int8) truncates
            x = torch.trunc(x)
        elif kind == "half_away":                                # halves away from zero: 2.5 -> 3, -2.5 -> -3
            x = torch.sign(x) * torch.floor(x.abs() + 0.5)
        else:
            x = torch.round(x)
        return x.clamp(-127, 127).to(torch.int8), scale
    return mistake


def _weights(ctx, g):
    torch = _torch()
    real = ctx.W["layers.0.mlp.gate_proj.weight"][:64].float().clone()     # (64, hidden)
    outlier = torch.randn(8, 32, generator=g) * 0.02
    outlier[2, 7] = 0.8                                                     # one large weight in row 2
    negative = -(torch.rand(4, 24, generator=g) + 0.1)                      # every weight negative
    negative[1] = torch.randn(24, generator=g)
    wide = (torch.randn(32, 16, generator=g) * 0.05).T                       # (16, 32), transposed: not contiguous
    zeros = torch.randn(6, 32, generator=g) * 0.02
    zeros[[1, 4]] = 0                                                       # rows 1 and 4: all zero
    n = real.shape[0]
    return [(real, (f"rows 0-{n - 1} of layers.0.mlp.gate_proj ({ctx.label}), fp32",
                    f"layers.0.mlp.gate_proj 的第 0-{n - 1} 行（{ctx.label}），fp32")),
            (outlier, ("8 x 32 with one outlier in row 2", "8 x 32，第 2 行有一个离群值")),
            (negative, ("4 x 24, rows of negative weights (the largest |w| is negative)",
                        "4 x 24，几行全是负的权重（最大的 |w| 是负数）")),
            (wide, ("16 x 32, transposed (not contiguous)", "16 x 32，转置过的（不连续）")),
            (zeros, ("6 x 32, rows 1 and 4 all zero (their scale: 1)", "6 x 32，第 1 行和第 4 行全是 0（它们的缩放因子：1）")),
            (_halves(), ("2 x 12, values exactly on .5 of a step (2.5, -2.5, 3.5, ... codes)",
                         "2 x 12，正好落在步长 .5 上的值（编码 2.5、-2.5、3.5……）"))]


def _halves():
    """Two rows whose w / scale is exactly k + 0.5 for some values. Row 0: max |w| = 127 / 128, so the
    scale is 1 / 128 exactly and w * (127 / amax) gives the same numbers; only the rounding of halves
    (to even: 2.5 -> 2, not 3) decides. Row 1: a max |w| (found by a search) for which w * (127 / amax)
    lands just under k + 0.5 for odd k (3, 5, 9), where w / scale is exactly on it: round sends these up,
    the other product down."""
    torch = _torch()
    rows = []
    for amax, ks in ((127 / 128, (2, -2, 4, -4, 0, 3)), (0.39411088824272156, (3, -3, 5, -5, 9, -9))):
        a = torch.tensor(amax, dtype=torch.float32)
        scale = a / 127
        halves = [(torch.tensor(abs(k) + 0.5) * scale * (1 if k >= 0 else -1)).item() for k in ks]
        rows.append([a.item(), -a.item() / 3] + halves + [a.item() / 7, -a.item() / 11, 0.0, a.item() / 2])
    return torch.tensor(rows, dtype=torch.float32)


def cases_260(ctx):
    g = ctx.gen(260)
    about_q = ("scale = w.abs().amax(dim=1) / 127, one per row (1 for a row of zeros); q = round(w / scale[:, None]), "
               "clamped to -127..127, as int8", "scale = w.abs().amax(dim=1) / 127，每行一个（全 0 的行取 1）；"
               "q = round(w / scale[:, None])，钳位到 -127..127，转成 int8")
    cases = []
    for w, name in _weights(ctx, g):
        cases.append(Case("quantize_int8", name, (w,), quantize_expected(w), SCALE_TOL, about=about_q))
    for w, name in _weights(ctx, g)[:2]:
        q, scale = quantize_expected(w)
        cases.append(Case("dequantize_int8", name, (q, scale), dequantize_expected(q, scale), SCALE_TOL,
                          about=("w' = q (as fp32) times its row's scale: q.float() * scale[:, None]",
                                 "w' = q（转成 fp32）乘以它那一行的缩放因子：q.float() * scale[:, None]")))
    return cases


MISTAKES = ("per_tensor_scale", "per_column_scale", "truncates", "half_away", "inverse_scale", "unsigned_range",
            "zero_scale", "epsilon_scale")


def _zero_rows_scales(case, got):
    """The result's scales on the input's rows of zeros (fp32; none where the input has no such row)."""
    torch = _torch()
    zero = (case.args[0] == 0).all(dim=1)
    return got[1][zero].float() if bool(zero.any()) else torch.ones(0)


def _zero_rows_scale_zero(case, got):
    """A row of zeros whose scale came back 0 or NaN: max |w| / 127 with nothing done about it."""
    scale = _zero_rows_scales(case, got)
    return bool(((scale == 0) | scale.isnan()).any())


def _zero_rows_scale_epsilon(case, got):
    """Rows of zeros whose scales are finite and not 0, yet not 1: an epsilon against dividing by zero
    (amax.clamp_min(1e-12) / 127, amax + 1e-8). zero_scale's words (0, NaN codes) would be wrong there."""
    scale = _zero_rows_scales(case, got)
    return scale.numel() > 0 and bool((scale.isfinite() & (scale != 0)).all()) and not bool((scale == 1).all())


DIAGNOSES_260 = [
    Diagnosis("per_tensor_scale", "quantize_int8",
              ("looks like one scale for the whole tensor (w.abs().max()): each row needs its own, "
               "w.abs().amax(dim=1), or one outlier makes the steps of every row coarse",
               "看起来整个张量只用了一个缩放因子（w.abs().max()）：每行要有自己的 w.abs().amax(dim=1)，"
               "否则一个离群值会让每一行的步长都变粗"),
              mistake=_quantize_mistake("per_tensor_scale"), hint=0),
    Diagnosis("per_column_scale", "quantize_int8",
              ("looks like one scale per column (amax over dim 0): a row is one output channel, so the scale is per "
               "row, w.abs().amax(dim=1), shape (out,)",
               "看起来是每列一个缩放因子（在第 0 维上取 amax）：一行是一个输出通道，所以缩放因子是每行一个，"
               "w.abs().amax(dim=1)，形状 (out,)"),
              mistake=_quantize_mistake("per_column_scale"), hint=0),
    Diagnosis("half_away", "quantize_int8",
              ("looks like halves were rounded away from zero (floor(|x| + 0.5), 2.5 -> 3): torch.round sends a value "
               "exactly on .5 to the even code (2.5 -> 2, -2.5 -> -2), as qwen/quant.py does",
               "看起来一半的值被向远离 0 的方向舍入了（floor(|x| + 0.5)，2.5 -> 3）：torch.round 把正好在 .5 上的值"
               "送到偶数编码（2.5 -> 2，-2.5 -> -2），qwen/quant.py 也是这样"),
              mistake=_quantize_mistake("half_away"), hint=1),
    Diagnosis("inverse_scale", "quantize_int8",
              ("looks like w was multiplied by 127 / amax instead of divided by the scale: the same number up to "
               "rounding, but a value that w / scale puts exactly on .5 lands just beside it and goes to the other "
               "code. Compute q = round(w / scale[:, None]) with the scale you return",
               "看起来 w 乘的是 127 / amax，而不是除以缩放因子：在舍入误差内是同一个数，但 w / scale 正好落在 .5 上的值"
               "会落在它旁边一点，于是去了另一个编码。要用返回的缩放因子计算 q = round(w / scale[:, None])"),
              mistake=_quantize_mistake("inverse_scale"), hint=1),
    Diagnosis("truncates", "quantize_int8",
              ("looks like the codes were truncated towards zero (.to(torch.int8) or int() without rounding): "
               "round first, torch.round(w / scale), so every weight moves by at most half a step",
               "看起来编码被向零截断了（没取整就 .to(torch.int8) 或 int()）：先取整，torch.round(w / scale)，"
               "这样每个权重最多移动半步"),
              mistake=_quantize_mistake("truncates"), hint=1),
    Diagnosis("unsigned_range", "quantize_int8",
              ("looks like the scale divides by 255, the span of an unsigned byte (0..255): a symmetric int8 range "
               "is -127..127, so the largest |w| maps to 127 and scale = max|w| / 127; with / 255 every weight "
               "above half the largest is clamped",
               "看起来缩放因子除以了 255，那是无符号字节（0..255）的跨度：对称的 int8 范围是 -127..127，最大的 |w| "
               "映射到 127，scale = max|w| / 127；除以 255 时，所有超过最大值一半的权重都被钳位"),
              mistake=_quantize_mistake("unsigned_range"), hint=0),
    Diagnosis("zero_scale", "quantize_int8",
              ("looks like a row of zeros got the scale 0 (its max |w|): w / 0 is NaN, and NaN cast to int8 is no "
               "code at all. Give such a row scale 1: torch.where(scale == 0, torch.ones_like(scale), scale) (any "
               "scale gives q = 0 there; 1 is what qwen/quant.py uses)",
               "看起来全 0 的行得到的缩放因子是 0（它的 max |w|）：w / 0 是 NaN，NaN 转成 int8 不是任何编码。"
               "让这样的行缩放因子为 1：torch.where(scale == 0, torch.ones_like(scale), scale)（那里任何缩放因子"
               "都给出 q = 0；qwen/quant.py 用的是 1）"),
              test=_zero_rows_scale_zero, hint=0),
    Diagnosis("epsilon_scale", "quantize_int8",
              ("looks like a row of zeros got a small scale instead of 1 (an epsilon against dividing by zero, e.g. "
               "w.abs().amax(dim=1).clamp_min(1e-12) / 127): its codes are right (q = 0 at any scale), but the "
               "scale this exercise, like qwen/quant.py, keeps for such a row is 1: "
               "torch.where(scale == 0, torch.ones_like(scale), scale)",
               "看起来全 0 的行得到的是一个很小的缩放因子而不是 1（为避免除以 0 而用的 epsilon，例如 "
               "w.abs().amax(dim=1).clamp_min(1e-12) / 127）：它的编码是对的（任何缩放因子都给出 q = 0），"
               "但本练习和 qwen/quant.py 一样，给这样的行的缩放因子是 1："
               "torch.where(scale == 0, torch.ones_like(scale), scale)"),
              test=_zero_rows_scale_epsilon, hint=0),
]

EXERCISES = [
    Exercise("260", "int8_quantize", ("int8 quantization per row, and back", "每行 int8 量化，以及反量化"), "easy", True,
             ("quantize_int8", "dequantize_int8"),
             [("Per row: scale = w.abs().amax(dim=1) / 127, shape (out,): the largest |w| of each row maps to +-127. "
               "Not w.abs().max() (one scale for the tensor), not / 255 (that is an unsigned byte's span). A row of "
               "zeros gets scale 1 (its max is 0, and w / 0 is NaN): torch.where(scale == 0, torch.ones_like(scale), "
               "scale).",
               "每行：scale = w.abs().amax(dim=1) / 127，形状 (out,)：每行最大的 |w| 映射到 +-127。"
               "不是 w.abs().max()（整个张量一个），也不是 / 255（那是无符号字节的跨度）。全 0 的行缩放因子取 1"
               "（它的最大值是 0，w / 0 是 NaN）：torch.where(scale == 0, torch.ones_like(scale), scale)。"),
              ("q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8): round to the nearest code, "
               "never truncate (.to(torch.int8) alone truncates towards zero).",
               "q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)：取整到最近的编码，不要截断"
               "（只用 .to(torch.int8) 会向零截断）。"),
              ("dequantize_int8(q, scale) = q.float() * scale[:, None]: each row times its own scale, fp32.",
               "dequantize_int8(q, scale) = q.float() * scale[:, None]：每行乘以自己的缩放因子，fp32。")],
             cases_260, DIAGNOSES_260,
             {"260_per_tensor_scale.py": "per_tensor_scale", "260_truncates.py": "truncates",
              "260_unsigned_range.py": "unsigned_range", "260_zero_scale.py": "zero_scale",
              "260_epsilon_scale.py": "epsilon_scale", "260_per_column_scale.py": "per_column_scale",
              "260_half_away.py": "half_away", "260_inverse_scale.py": "inverse_scale"}),
]
