"""Comparing a learner's result with the expected one, in the judge's process, and saying how they differ.

The values compared here were decoded by the judge from plain data (wire.py): fresh tensors
and built-in numbers, strings, lists and dicts. Nothing the learner's code defined or patched
runs here.
"""
import dataclasses
import math
import types

import torch

from practice._judge.exercises import DEFAULT_TOL, Tol
from qwen.lang import T


@dataclasses.dataclass
class Raised:
    """What a learner function did instead of returning: kind is todo/exception/memory/exit/unsupported."""
    kind: str
    message: str


class Mismatch(Exception):
    """A case failed: `detail` holds the numbers for the report."""

    def __init__(self, summary, **detail):
        super().__init__(summary)
        self.summary = summary
        self.detail = detail


def describe(t):
    if isinstance(t, torch.Tensor):
        return f"{list(t.shape)} {dtype_name(t.dtype)}"
    return type(t).__name__


def describe_input(a, limit=80):
    """An input as a failing case's details show it: the values of small ones (numbers, short lists
    and tuples of numbers, tensors of up to 12 values), so the call can be repeated; else its shape
    and dtype, or its type (a tensor's values only where they fit in about a line)."""
    if a is None or type(a) in (bool, int, float):
        return repr(a)
    if isinstance(a, str):
        return repr(a) if len(repr(a)) <= limit else f"str of {len(a)} characters"
    if type(a) in (list, tuple) and all(v is None or type(v) in (bool, int, float) for v in a):
        r = repr(a)
        return r if len(r) <= limit else f"{type(a).__name__} of {len(a)}: {r[:limit - 20]}...]"
    if isinstance(a, torch.Tensor) and a.numel() <= 12 and not a.is_complex():
        values = [float(f"{v:.4g}") if isinstance(v, float) else v for v in a.flatten().tolist()]
        shaped = torch.tensor(values, dtype=torch.float64 if a.is_floating_point() else torch.int64).reshape(a.shape)
        text = repr(shaped.tolist()) if a.dim() else repr(values[0])
        if len(text) <= 2 * limit:
            return f"{describe(a)} {text}"
    return describe(a)


def dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def tolerance_for(expected, tol=None):
    if tol is not None:
        return tol
    if isinstance(expected, torch.Tensor):
        return DEFAULT_TOL.get(dtype_name(expected.dtype), Tol(1e-5, 1e-5))
    return Tol(1e-9, 1e-9)


def _ordered(t):
    """bf16/fp16 bit patterns as integers that count representable steps (-0 and +0 coincide)."""
    i = t.contiguous().view(torch.int16).to(torch.int32)
    return torch.where(i < 0, -32768 - i, i)


def close(expected, got, tol=None):
    """True when `got` matches `expected` within tolerance (no report): for diagnoses."""
    try:
        check_value(expected, got, tol=tol)
        return True
    except Mismatch:
        return False


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
                         got=dtype_name(got.dtype), exp=dtype_name(expected.dtype)),
                       expected=describe(expected), got=describe(got))
    tol = tolerance_for(expected, tol)
    if not expected.is_floating_point():
        if torch.equal(got, expected):
            return
        index = _first(got != expected)
        raise Mismatch(T("values differ", "数值不同"), expected=describe(expected), got=describe(got), first_index=index,
                       expected_value=_value(expected, index), got_value=_value(got, index), within=
                       (got == expected).double().mean().item(), tolerance=T("exact", "完全相同"))
    g, e = got.double(), expected.double()
    nan_g, nan_e = torch.isnan(g), torch.isnan(e)
    # An infinity is "NaN or inf in your output" only where the expected output has no infinity of
    # that sign at all: where -inf is one of its values (a filtered logit), a -inf in the wrong place
    # is a wrong value like any other, reported as "values differ" with its index.
    stray_inf = torch.zeros_like(nan_g)
    for sign in (1, -1):
        if not (e == sign * math.inf).any():                      # this infinity is never a right value here
            stray_inf |= g == sign * math.inf
    bad_special = (nan_g & ~nan_e) | stray_inf
    if bad_special.any():
        index = _first(bad_special)
        raise Mismatch(T("NaN or inf in your output at index {i} (expected {e})",
                         "你的输出在下标 {i} 处是 NaN 或 inf（应当是 {e}）", i=index, e=_value(e, index)),
                       expected=describe(expected), got=describe(got), first_index=index)
    finite = torch.isfinite(e)
    same = (g == e) | (nan_g & nan_e)
    diff = torch.where(finite, (g - e).abs(), torch.where(same, 0.0, math.inf))   # a missed -inf is off by inf, not 0
    if tol.ulps is not None and expected.dtype in (torch.bfloat16, torch.float16):
        steps = (_ordered(got) - _ordered(expected)).abs()
        ok = (steps <= tol.ulps) & finite | same
    else:
        ok = (diff <= tol.atol + tol.rtol * e.abs()) & finite | same
    exact = same.double().mean().item() if g.numel() else 1.0
    if ok.all() and exact >= tol.exact_share:
        return
    rel = diff / e.abs().clamp_min(1e-30)
    index = _first(~ok) if not ok.all() else _first(~same)
    detail = dict(expected=describe(expected), got=describe(got), max_abs=diff.max().item() if diff.numel() else 0.0,
                  max_rel=rel[finite].max().item() if finite.any() else 0.0, first_index=index,
                  expected_value=_value(e, index), got_value=_value(g, index),
                  within=ok.double().mean().item(), tolerance=tol.text(dtype_name(expected.dtype)))
    if ok.all():
        raise Mismatch(T("only {p:.1%} of the values equal the expected ones bit for bit; at least {n:.0%} must "
                         "(compute in fp32, round once at the end)",
                         "只有 {p:.1%} 的数值与期望值逐位相同；至少要 {n:.0%}（在 fp32 中计算，最后只舍入一次）",
                         p=exact, n=tol.exact_share), exact=exact, **detail)
    raise Mismatch(T("values differ", "数值不同"), **detail)


def check_value(expected, got, name="value", rel=1e-9, tol=None):
    """Plain values (ints, floats, strings, dicts, lists, tuples, SimpleNamespace, tensors inside them),
    as decoded by the judge. `tol` applies to every tensor inside."""
    if isinstance(expected, torch.Tensor):
        try:
            return check_tensor(expected, got, tol)
        except Mismatch as m:
            raise Mismatch(T("{n}: {s}", "{n}：{s}", n=name, s=m.summary) if name != "value" else m.summary, **m.detail) from None
    if isinstance(expected, types.SimpleNamespace):
        if not isinstance(got, types.SimpleNamespace):
            raise Mismatch(T("{n}: returned a {g}, expected an object with attributes {a}", "{n}：返回了 {g}，应当是带属性 {a} 的对象",
                             n=name, g=type(got).__name__, a=sorted(vars(expected))))
        return check_value(vars(expected), vars(got), name, rel, tol)
    if type(expected) is float:
        try:
            near = type(got) in (int, float) and math.isclose(got, expected, rel_tol=rel, abs_tol=rel)
        except OverflowError:                                     # an int too large for a float
            near = False
        if not near:
            raise Mismatch(T("{n}: got {g}, expected {e}", "{n}：得到 {g}，应当是 {e}", n=name, g=_short(got),
                             e=_short(expected)))
        return
    if type(got) is not type(expected):
        raise Mismatch(T("{n}: returned {g}, expected {e}", "{n}：返回了 {g}，应当是 {e}",
                         n=name, g=_a(type(got).__name__), e=_a(type(expected).__name__)))
    if isinstance(expected, dict):
        missing = [k for k in expected if k not in got]
        extra = [k for k in got if k not in expected]
        if missing or extra:
            raise Mismatch(T("{n}: missing keys {m}, unexpected keys {x}", "{n}：缺少键 {m}，多出键 {x}",
                             n=name, m=missing[:3], x=extra[:3]))
        for k in expected:
            check_value(expected[k], got[k], f"{name}[{k!r}]", rel, tol)
        return
    if isinstance(expected, (list, tuple)):
        if len(expected) != len(got):
            raise Mismatch(T("{n}: {g} items, expected {e}", "{n}：有 {g} 项，应当是 {e} 项", n=name, g=len(got), e=len(expected)))
        for i, (a, b) in enumerate(zip(expected, got)):
            check_value(a, b, f"{name}[{i}]", rel, tol)
        return
    if got != expected:
        raise Mismatch(T("{n}: got {g}, expected {e}", "{n}：得到 {g}，应当是 {e}", n=name, g=_short(got),
                         e=_short(expected)))


def _a(word):
    """'an int', 'a float': the English article for a type's name (the Chinese text has none)."""
    from qwen.lang import get_lang
    return word if get_lang() == "zh" else ("an " if word[:1] in "aeiouAEIOU" else "a ") + word


def _short(v):
    r = repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


def unravel(flat, shape):
    """A flat index as one index per dimension of `shape` (what torch.unravel_index gives). Not that
    function: its argument check imports torch.fx's symbolic shapes, and with them sympy, about 1 s of
    CPU at the first failing case of every judge process."""
    index = []
    for size in reversed(tuple(shape)):
        flat, i = divmod(int(flat), int(size))
        index.append(i)
    return index[::-1]


def _first(mask):
    flat = mask.flatten().nonzero()
    if not len(flat):
        return []
    return unravel(flat[0, 0], mask.shape) if mask.dim() else []


def _value(t, index):
    v = t[tuple(index)].item() if index or t.dim() == 0 else float("nan")
    return float(f"{v:.6g}") if isinstance(v, float) else v
