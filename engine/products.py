"""The engine's matrix products: the kernel it installs behind the lesson's seam (qwen/linear.py).

Why: generation multiplies few rows by every weight: one row per decode step, k + 1 rows in a
verify pass (chapter 12). Such a product does 2 flops per weight value it reads, so its time is
the time to read the weights from memory. torch's F.linear hands it to the CPU BLAS, which serves
it poorly in two ways:

  * one row: the BLAS's matrix-vector product may run on one thread whatever
    torch.set_num_threads says, and so reads the weight at one core's speed;
  * 2 to a few rows: a general matrix product with the weight transposed, which reads a tall
    weight across its rows instead of along them.

So `fast_product` computes such calls another way, by the number of rows:

  * one row, on 2 threads or more: oneDNN's inner product (torch.ops.mkldnn._linear_pointwise, in
    torch's x86 builds, the kernel torch.compile uses), which splits the weight's rows over the
    threads (on one thread the BLAS is as fast, so F.linear is kept);
  * 2 to TURNED_ROWS rows of a weight with at least as many outputs as inputs (the projections
    into attention, the MLP's gate and up, the output layer): (weight @ x^T)^T, which reads the
    weight as it is stored;
  * the other calls of 2 to FEW_ROWS rows (the projections back to the hidden size, or 5 rows or
    more): oneDNN's inner product, whose time hardly grows with the rows;
  * a bf16 call on a CPU with bf16 arithmetic: oneDNN's product on the weight packed once
    (engine/packed.py); of many rows on a CPU without it: engine/upcast.py;
  * anything else, and weights under MIN_VALUES values (oneDNN's set-up costs more than the
    product): declined, so the lesson's F.linear runs.

bench/bench_model.py and bench/bench_speculative.py measure each path against F.linear.

The numbers are the same products summed in another order: they agree with F.linear to fp32
rounding, not bit for bit (tests/test_products.py). A call that wants a gradient is declined:
oneDNN's inner product has no backward. How it reaches the model: `with fast():` installs
`fast_product` as qwen/linear.py's kernel; every `qwen.linear.Linear` and the output layer call
`qwen.linear.product`, which asks it first. Nothing of the model is changed or replaced.
"""
import functools
import platform

import torch
import torch.nn.functional as F

from engine import packed, upcast
from qwen.lang import tr
from qwen.linear import kernel

FEW_ROWS = 16                                  # up to this many rows: oneDNN or (weight @ x^T)^T
TURNED_ROWS = 4                                # up to this many, for a tall weight: (weight @ x^T)^T
MIN_VALUES = 1 << 20                           # smaller weights keep F.linear (the 16-row gates, say)


def few_rows_linear(x, weight):
    """x @ weight.T, what F.linear(x, weight) computes, as (weight @ x^T)^T: the same numbers up to
    rounding. x (..., in), weight (out, in) -> (..., out). The weight comes first, so the CPU BLAS
    reads it as it is stored instead of transposed."""
    rows = x.reshape(-1, x.shape[-1])                                          # (rows, in)
    return torch.mm(weight, rows.t()).t().reshape(*x.shape[:-1], weight.shape[0])   # (out, rows) -> (..., out)


def onednn_linear(x, weight):
    """F.linear(x, weight) by oneDNN's inner product on every thread torch uses.
    x (..., in), weight (out, in) fp32 -> (..., out)."""
    rows = x.reshape(-1, x.shape[-1]).contiguous()                             # (rows, in)
    out = torch.ops.mkldnn._linear_pointwise(rows, weight, None, "none", [], "")
    return out.reshape(*x.shape[:-1], weight.shape[0])                         # (rows, out) -> (..., out)


@functools.lru_cache(maxsize=1)
def onednn_available():
    """Whether this torch has oneDNN's inner product on an x86 CPU, and it computes what F.linear
    does (checked once on a small product of 3 rows). Elsewhere one row keeps F.linear and more rows
    are turned around."""
    if platform.machine().lower() not in ("x86_64", "amd64") or not torch.backends.mkldnn.is_available():
        return False
    try:
        g = torch.Generator().manual_seed(0)
        w, x = torch.randn(64, 32, generator=g), torch.randn(1, 3, 32, generator=g)
        return torch.allclose(onednn_linear(x, w), F.linear(x, w), atol=1e-5, rtol=1e-5)
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


def takes(weight):
    """Whether the few-row paths serve this weight: fp32, on the CPU, 2-D, at least MIN_VALUES values."""
    return (weight.dtype == torch.float32 and weight.device.type == "cpu" and weight.dim() == 2
            and weight.numel() >= MIN_VALUES)


def serves(x, weight):
    """Whether this call is one the few-row paths compute as F.linear does: the weight `takes`, x
    matches it (dtype, device, width: else F.linear's own error, not oneDNN's), and no gradient is
    wanted (oneDNN's inner product has no backward: its result would silently get none)."""
    return (takes(weight) and x.dtype is torch.float32 and x.is_cpu and x.shape[-1] == weight.shape[1]
            and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)))


def path(x, weight):
    """The function this call of x @ weight.T is computed with: F.linear, onednn_linear or few_rows_linear."""
    rows = x.numel() // max(1, x.shape[-1]) if x.dim() else 0    # (a 0-d x: F.linear's own error)
    if not 1 <= rows <= FEW_ROWS or not serves(x, weight):
        return F.linear
    if rows == 1:                                # one thread: the BLAS's product is as fast
        return onednn_linear if torch.get_num_threads() > 1 and onednn_available() else F.linear
    if (rows <= TURNED_ROWS and weight.shape[0] >= weight.shape[1]) or not onednn_available():
        return few_rows_linear                   # a tall weight, 2 to 4 rows: the weight first
    return onednn_linear                         # a wide one, or 5 rows or more: oneDNN


def linear(x, weight):
    """F.linear(x, weight) (no bias) by the path for its number of rows (`path`): the same numbers
    to fp32 rounding; a call no path serves runs F.linear itself, with F.linear's errors."""
    return path(x, weight)(x, weight)


def fast_product(x, weight, bias=None):
    """The kernel behind qwen/linear.py's seam: x (..., in) @ weight (out, in)^T (+ bias) -> (..., out)
    by a few-row path, a bf16 product on a packed weight (engine/packed.py), or a long bf16 prompt's
    product in fp32 (engine/upcast.py); None for the rest (the lesson's F.linear then runs)."""
    if bias is None and path(x, weight) is not F.linear:
        return linear(x, weight)
    if packed.takes(x, weight, bias):
        return packed.linear(x, weight, bias)
    if upcast.pays(x, weight, bias):
        return upcast.linear(x, weight, bias)
    return None


def fast():
    """`with fast():` every product of the model runs through `fast_product` (the same numbers, to rounding)."""
    return kernel(fast_product)


def described(weight):
    """How `fast()` computes a decode step's products with this weight on this machine: one line in
    the learner's language, said under a timing (a figure from another path is another figure)."""
    if weight.device.type != "cpu":
        return tr("torch's own products on {d}", "torch 在 {d} 上自己的乘积", d=weight.device.type)
    if weight.dtype == torch.bfloat16 and packed.available():
        return tr("bf16 products on weights packed once for oneDNN (this CPU has bf16 arithmetic)",
                  "bf16 乘积，权重为 oneDNN 打包一次（这个 CPU 有 bf16 运算）")
    if weight.dtype == torch.bfloat16 and upcast.emulated_bf16():
        return tr("bf16 products: a prompt's in fp32, one row in bf16 (this CPU has no bf16 arithmetic)",
                  "bf16 乘积：提示词的用 fp32，单行用 bf16（这个 CPU 没有 bf16 运算）")
    if weight.dtype == torch.bfloat16:
        return tr("torch's own bf16 products (this torch cannot pack a bf16 weight for oneDNN)",
                  "torch 自己的 bf16 乘积（这个 torch 无法为 oneDNN 打包 bf16 权重）")
    if takes(weight) and onednn_available() and torch.get_num_threads() > 1:
        return tr("fp32 products of one row through oneDNN's inner product", "单行的 fp32 乘积走 oneDNN 的内积")
    return tr("fp32 products through torch's F.linear", "fp32 乘积走 torch 的 F.linear")
