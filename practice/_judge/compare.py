"""Comparing a learner's result with the expected one, and saying exactly how they differ."""
import math

import torch

from qwen.lang import T

# (atol, rtol) per output dtype; low-precision outputs must also match exactly almost everywhere
TOLERANCE = {torch.float64: (1e-9, 1e-9), torch.float32: (1e-5, 1e-5),
             torch.bfloat16: (1e-6, 2 ** -7), torch.float16: (1e-6, 2 ** -10)}
EXACT_SHARE = {torch.bfloat16: 0.99, torch.float16: 0.99}


class Mismatch(Exception):
    """A case failed: `detail` holds the numbers for the report."""

    def __init__(self, summary, **detail):
        super().__init__(summary)
        self.summary = summary
        self.detail = detail


def describe(t):
    if isinstance(t, torch.Tensor):
        return f"{list(t.shape)} {str(t.dtype).replace('torch.', '')}"
    return type(t).__name__


def check_tensor(expected, got, tol=None):
    """Raise Mismatch unless `got` is a tensor equal to `expected` within tolerance."""
    if not isinstance(got, torch.Tensor):
        raise Mismatch(T("returned {got}, expected a tensor {exp}", "返回了 {got}，应当返回张量 {exp}",
                         got=describe(got), exp=describe(expected)))
    if got.shape != expected.shape:
        raise Mismatch(T("shape {got}, expected {exp}", "形状是 {got}，应当是 {exp}",
                         got=list(got.shape), exp=list(expected.shape)), expected=describe(expected), got=describe(got))
    if got.dtype != expected.dtype:
        raise Mismatch(T("dtype {got}, expected {exp}", "数据类型是 {got}，应当是 {exp}",
                         got=got.dtype, exp=expected.dtype), expected=describe(expected), got=describe(got))
    g, e = got.detach().double(), expected.detach().double()
    if (torch.isnan(g) & ~torch.isnan(e)).any() or (torch.isinf(g) & ~torch.isinf(e)).any():
        bad = (torch.isnan(g) & ~torch.isnan(e)) | (torch.isinf(g) & ~torch.isinf(e))
        index = _first(bad)
        raise Mismatch(T("NaN or inf in your output at index {i} (expected {e})",
                         "你的输出在下标 {i} 处是 NaN 或 inf（应当是 {e}）", i=index, e=_value(e, index)),
                       expected=describe(expected), got=describe(got), first_index=index)
    atol, rtol = tol or TOLERANCE.get(expected.dtype, (1e-5, 1e-5))
    finite = torch.isfinite(e)
    diff = torch.where(finite, (g - e).abs(), torch.zeros_like(g))
    same_special = ~finite & ((g == e) | (torch.isnan(g) & torch.isnan(e)))
    ok = (diff <= atol + rtol * e.abs()) & finite | same_special
    exact = ((g == e) | (torch.isnan(g) & torch.isnan(e))).double().mean().item() if g.numel() else 1.0
    need_exact = EXACT_SHARE.get(expected.dtype, 0.0)
    if ok.all() and exact >= need_exact:
        return
    rel = diff / e.abs().clamp_min(1e-30)
    index = _first(~ok) if not ok.all() else _first(g != e)
    detail = dict(expected=describe(expected), got=describe(got), max_abs=diff.max().item(),
                  max_rel=rel[finite].max().item() if finite.any() else 0.0, first_index=index,
                  expected_value=_value(e, index), got_value=_value(g, index),
                  within=ok.double().mean().item(), tolerance=f"atol={atol:g}, rtol={rtol:g}")
    if ok.all():
        raise Mismatch(T("only {p:.1%} of the values equal the expected ones exactly; at least {n:.0%} must "
                         "(round once, at the end, from fp32)",
                         "只有 {p:.1%} 的数值与期望值完全相同；至少要 {n:.0%}（从 fp32 只在最后舍入一次）",
                         p=exact, n=need_exact), exact=exact, **detail)
    raise Mismatch(T("values differ", "数值不同"), **detail)


def check_value(expected, got, name="value", rel=1e-9):
    """Plain Python values (ints, strings, dicts, lists)."""
    if isinstance(expected, float):
        if not isinstance(got, (int, float)) or not math.isclose(got, expected, rel_tol=rel, abs_tol=rel):
            raise Mismatch(T("{n}: got {g!r}, expected {e!r}", "{n}：得到 {g!r}，应当是 {e!r}", n=name, g=got, e=expected))
        return
    if type(got) is not type(expected) and not (isinstance(expected, int) and isinstance(got, int)):
        raise Mismatch(T("{n}: returned a {g}, expected a {e}", "{n}：返回了 {g}，应当是 {e}",
                         n=name, g=type(got).__name__, e=type(expected).__name__))
    if isinstance(expected, dict):
        missing = [k for k in expected if k not in got]
        extra = [k for k in got if k not in expected]
        if missing or extra:
            raise Mismatch(T("{n}: missing keys {m}, unexpected keys {x}", "{n}：缺少键 {m}，多出键 {x}",
                             n=name, m=missing[:3], x=extra[:3]))
        for k in expected:
            check_value(expected[k], got[k], f"{name}[{k!r}]")
        return
    if isinstance(expected, (list, tuple)) and len(expected) == len(got):
        for i, (a, b) in enumerate(zip(expected, got)):
            check_value(a, b, f"{name}[{i}]")
        return
    if got != expected:
        raise Mismatch(T("{n}: got {g!r}, expected {e!r}", "{n}：得到 {g!r}，应当是 {e!r}", n=name, g=got, e=expected))


def _first(mask):
    flat = mask.flatten().nonzero()
    if not len(flat):
        return []
    return [int(i) for i in torch.unravel_index(flat[0, 0], mask.shape)] if mask.dim() else []


def _value(t, index):
    v = t[tuple(index)].item() if index or t.dim() == 0 else float("nan")
    return float(f"{v:.6g}")
