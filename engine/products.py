"""Faster matrix products for generation's few-row calls, beside the plain F.linear (issue 24).

Why: generation multiplies few rows by every weight: one row per decode step, k + 1 rows in a
verify pass (chapter 12). Such a product does 2 flops per weight value it reads, so its time is
the time to read the weights: 3.0 GB per decoded token in fp32, about 0.18 s at this machine's
17 GB/s (torch.sum over 1 GB with 2 threads). torch's F.linear calls MKL, which on this CPU (an
AMD EPYC with AVX2) reaches neither:

  * one row: MKL's matrix-vector product runs on one thread whatever torch.set_num_threads says
    (bench/bench_model.py's "1-row products" with --threads 2: the projections of 12 layers read at
    8.6 GB/s, the output layer at 9.8; a single 3584 x 1024 weight streamed from memory reads at
    10.6-10.9 GB/s with 1 thread and with 2);
  * 2 to 16 rows: a general matrix product with the weight transposed (bench/bench_speculative.py:
    a verify pass of 4 tokens through F.linear took 4.2 decode steps, with every product turned
    around as below 1.7; 2 threads, load about 2).

So generation runs its calls inside `FastProducts(model)`, which sends the model's large fp32
nn.Linear layers and its output layer to `linear` below, by the number of rows:

  * one row, on 2 threads or more: oneDNN's inner product (torch.ops.mkldnn._linear_pointwise, in
    torch's x86 builds, the kernel torch.compile uses), which splits the weight's rows over the
    threads: 14.2 GB/s for the projections and 17.3 for the output layer, against 8.6 and 9.8 (on
    one thread the two are alike, 10.9 against 10.6 GB/s for the single weight, so F.linear is kept);
  * 2 to TURNED_ROWS rows of a weight with at least as many outputs as inputs (the projections
    into the attention, the MLP's gate and up, the output layer): (weight @ x^T)^T, which reads the
    weight as it is stored;
  * the other calls of 2 to FEW_ROWS rows (the projections back to the hidden size: down_proj,
    out_proj, o_proj; and 5 rows or more): oneDNN's inner product, whose time hardly grows with
    the rows. MKL's product turned around is quick only for tall weights and 2 to 4 rows (at 3
    rows the two are close; 2 threads, and 1 thread too: with 4 rows a 1024 x 3584 weight 1.99 ms
    turned around against 0.86 in oneDNN, a 3584 x 1024 one 0.72 against 0.88; /tmp scripts, Dec 2);
  * anything else, and weights under MIN_VALUES values (oneDNN's set-up costs more than the
    product): F.linear, as it is.

bench/bench_model.py measures each side by side ("1-row products", "where one decode step goes").
The figures above are from an AVX2 EPYC. On the AVX-512 Zen 5 this project's machines became (Dec 2,
2 threads, the 145 large weights of the full-size model one after the other, 3.06 GB, median and best
of 4): one row 88 (75) ms through oneDNN against 157 (155) through F.linear; four rows 131 (117) ms as
(W @ x^T)^T against 352 (329) through F.linear. bench/bench_speculative.py prints the 4-row products
of each weight shape of the model both ways (Dec 2, 2 threads, median ms per weight, turned around
against oneDNN): 6144 x 1024 0.65 against 0.99, 3584 x 1024 0.37 against 0.52, the output layer 27.6
against 34.3; 1024 x 3584 0.98 against 0.50, 1024 x 2048 0.55 against 0.32. Tall weights turned,
wide ones in oneDNN: a verify pass of 4 tokens went from 1.45 decode steps (every product turned
around, 07:29) to 1.12, 1.21 and 1.17 (07:38-07:49, load about 1).
The numbers are the same products summed in another order: they agree with F.linear to fp32
rounding (about 1e-6 relative), not bit for bit. tests/test_products.py checks each path
against F.linear, and that the layers are put back after.

How it is wired in: qwen/generate.py's generate_ids (so generate, Chat and chapter 9) and
qwen/mtp.py (the head's drafts, the verify pass) read through it. The model is not changed:
inside the context the chosen layers get an instance `forward` (and the model an instance
`logits`), removed on the way out, so what a learner prints or calls outside generation is the
plain nn.Linear; one that already has its own (--mine's parts, practice/mine.py) keeps it. bf16
weights keep their own path (engine/upcast.py reads a bf16 prompt); other devices keep F.linear, and
CPUs without oneDNN keep it for one row and turn every product of 2 to FEW_ROWS rows around.
"""
import functools
import platform

import torch
import torch.nn as nn
import torch.nn.functional as F

FEW_ROWS = 16                                  # up to this many rows: oneDNN or (weight @ x^T)^T
TURNED_ROWS = 4                                # up to this many, for a tall weight: (weight @ x^T)^T
MIN_VALUES = 1 << 20                           # smaller weights keep F.linear: a decode step's 36 gates
                                               # (16 x 1024) took 4.1 ms in oneDNN, 1.2 in F.linear


def few_rows_linear(x, weight):
    """x @ weight.T, what F.linear(x, weight) computes, as (weight @ x^T)^T: the same numbers up to
    rounding. x (..., in), weight (out, in) -> (..., out). The weight comes first, so the CPU BLAS
    reads it as it is stored instead of transposed (module docstring)."""
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
    are turned around: not measured there."""
    if platform.machine().lower() not in ("x86_64", "amd64") or not torch.backends.mkldnn.is_available():
        return False
    try:
        g = torch.Generator().manual_seed(0)
        w, x = torch.randn(64, 32, generator=g), torch.randn(1, 3, 32, generator=g)
        return torch.allclose(onednn_linear(x, w), F.linear(x, w), atol=1e-5, rtol=1e-5)
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


def linear(x, weight):
    """F.linear(x, weight) (no bias) for a large fp32 CPU weight, by the path for its number of rows.
    A call these paths do not serve runs F.linear as it is (`serves`): the same numbers, the same errors."""
    return path(x, weight)(x, weight)


def path(x, weight):
    """The function `linear` computes this call with: F.linear, onednn_linear or few_rows_linear."""
    rows = x.numel() // max(1, x.shape[-1]) if x.dim() else 0    # (a 0-d x: F.linear's own error)
    if not 1 <= rows <= FEW_ROWS or not serves(x, weight):
        return F.linear
    if rows == 1:                                # one thread: MKL's product is as fast (10.6 against 10.9 GB/s)
        return onednn_linear if torch.get_num_threads() > 1 and onednn_available() else F.linear
    if (rows <= TURNED_ROWS and weight.shape[0] >= weight.shape[1]) or not onednn_available():
        return few_rows_linear                   # a tall weight, 2 to 4 rows: MKL, the weight first
    return onednn_linear                         # a wide one, or 5 rows or more: oneDNN


def takes(weight):
    """Whether `linear` serves this weight: fp32, on the CPU, 2-D, at least MIN_VALUES values."""
    return (weight.dtype == torch.float32 and weight.device.type == "cpu" and weight.dim() == 2
            and weight.numel() >= MIN_VALUES)


def serves(x, weight):
    """Whether this call is one `linear`'s paths compute as F.linear does, checked at each call (the
    layers are found once per run, and a weight may be swapped between steps): the weight `takes`, x
    matches it (dtype, device, width; else F.linear's own error, not oneDNN's "could not create a
    primitive descriptor"), and no gradient is wanted (oneDNN's inner product has no backward: its
    result would silently get none). About 3.4 us a call (load 2.7): 0.5 ms of a full-size decode
    step's 139 products, against a step of about 240 ms."""
    return (takes(weight) and x.dtype is torch.float32 and x.is_cpu and x.shape[-1] == weight.shape[1]
            and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)))


class FastProducts:
    """While active (`with FastProducts(model):`): the model's large fp32 nn.Linear layers (no bias)
    and its output layer multiply with `linear`; put back on the way out, also when the body (or the
    entering itself: Ctrl-C) raises. The layers are found once, when it is made: a decode loop makes
    one and enters it at every step (entering sets an instance attribute per layer, microseconds;
    finding them walks the whole model).

    A layer that already has a `forward` on the instance, and a model with its own `logits` (a
    learner's part, practice/mine.py; another FastProducts active on the same model) keep theirs: they
    run, and they are still there after (the way out removes only what this one set)."""

    def __init__(self, model):
        self.model = model
        layers = [m for m in model.modules() if type(m) is nn.Linear and m.bias is None and takes(m.weight)] \
            if isinstance(model, nn.Module) else []                   # (tests drive generation with stand-ins)
        self.forwards = [(m, functools.partial(_layer, m)) for m in layers]
        output = getattr(model, "output_layer", "none") is None and \
            takes(getattr(model, "output_weight", torch.empty(0)))
        self.logits = functools.partial(_logits, model) if output else None

    def __enter__(self):
        try:
            for m, forward in self.forwards:
                if "forward" not in m.__dict__:                       # else theirs runs (class docstring)
                    object.__setattr__(m, "forward", forward)         # (nn.Module's own setattr: slower)
            if self.logits is not None and "logits" not in self.model.__dict__:
                object.__setattr__(self.model, "logits", self.logits)
        except BaseException:                                         # (Ctrl-C half way: none left behind)
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        for m, forward in self.forwards:
            if m.__dict__.get("forward") is forward:                  # ours: remove it
                del m.__dict__["forward"]
        if self.logits is not None and self.model.__dict__.get("logits") is self.logits:
            del self.model.__dict__["logits"]
        return False


def _layer(module, x):
    return linear(x, module.weight)


def _logits(model, h):
    return linear(h, model.output_weight).float()                    # as Qwen35.logits: (..., vocab) fp32


def fast_product(x, weight, bias=None):
    """The engine's kernel behind qwen/linear.py's seam: a few-row fp32 product by `linear`'s paths,
    a long bf16 prompt's product in fp32 (engine/upcast.py); None (the lesson's F.linear) for the rest."""
    from engine import upcast
    if bias is None and serves(x, weight) and path(x, weight) is not F.linear:
        return linear(x, weight)
    if upcast.pays(x, weight) and upcast.emulated_bf16() and upcast._same_dtype_bias(bias, weight):
        return upcast.linear(x, weight, bias)
    return None


def fast():
    """`with fast():` the model's products run through `fast_product` (the same numbers, to rounding)."""
    from qwen.linear import kernel
    return kernel(fast_product)
