"""Faster matrix products for generation's few-row calls, beside the plain F.linear (issue 24).

Why: generation multiplies few rows by every weight: one row per decode step, k + 1 rows in a
verify pass (chapter 12). Such a product does 2 flops per weight value it reads, so its time is
the time to read the weights: 3.0 GB per decoded token in fp32, about 0.18 s at this machine's
17 GB/s (torch.sum over 1 GB with 2 threads). torch's F.linear calls MKL, which on this CPU (an
AMD EPYC with AVX2) reaches neither:

  * one row: MKL's matrix-vector product runs on one thread whatever torch.set_num_threads says
    (a 3584 x 1024 fp32 weight read from memory: 10.9 GB/s with 1 thread and with 2);
  * 2 to 16 rows: a general matrix product with the weight transposed, 3-4x slower per call
    than one row.

So generation runs its calls inside `fast_products(model)`, which sends the model's large fp32
nn.Linear layers and its output layer to `linear` below, by the number of rows:

  * one row: oneDNN's inner product (torch.ops.mkldnn._linear_pointwise, in torch's x86 builds,
    the kernel torch.compile uses), which splits the weight's rows over the threads: 17.0 GB/s;
  * 2 to FEW_ROWS rows: (weight @ x^T)^T, which reads the weight as it is stored;
  * anything else, weights under MIN_VALUES values (oneDNN's set-up costs more than the
    product), and one row that autograd records (oneDNN's product has no backward): F.linear, as it is.

bench/bench_model.py measures each side by side ("1-row products", "where one decode step goes").
The numbers are the same products summed in another order: they agree with F.linear to fp32
rounding (about 1e-6 relative), not bit for bit. tests/test_products.py checks each path
against F.linear, and that the layers are put back after.

How it is wired in: qwen/generate.py's generate_ids (so generate, Chat and chapter 9) and
qwen/mtp.py (the head's drafts, the verify pass) read through it. The model is not changed:
inside the context the chosen layers get an instance `forward` (and the model an instance
`logits`), removed on the way out, so what a learner prints or calls outside generation is the
plain nn.Linear. bf16 weights keep their own path (qwen/upcast.py reads a bf16 prompt); other
devices and CPUs without oneDNN keep F.linear for one row.
"""
import contextlib
import functools
import platform

import torch
import torch.nn as nn
import torch.nn.functional as F

FEW_ROWS = 16                                  # up to this many rows: (weight @ x^T)^T
MIN_VALUES = 1 << 20                           # smaller weights keep F.linear (the 16 x 1024 gates: 3x slower in oneDNN)


def few_rows_linear(x, weight):
    """x @ weight.T, what F.linear(x, weight) computes, as (weight @ x^T)^T: the same numbers up to
    rounding. x (..., in), weight (out, in) -> (..., out). The weight comes first, so the CPU BLAS
    reads it as it is stored instead of transposed (module docstring)."""
    rows = x.reshape(-1, x.shape[-1])                                          # (rows, in)
    return torch.mm(weight, rows.t()).t().reshape(*x.shape[:-1], weight.shape[0])   # (out, rows) -> (..., out)


def one_row_linear(x, weight):
    """F.linear(x, weight) for one row, by oneDNN's inner product on every thread torch uses.
    x (..., in) holding one row, weight (out, in) fp32 -> (..., out)."""
    out = torch.ops.mkldnn._linear_pointwise(x.reshape(1, -1).contiguous(), weight, None, "none", [], "")
    return out.reshape(*x.shape[:-1], weight.shape[0])                         # (1, out) -> (..., out)


@functools.lru_cache(maxsize=1)
def onednn_available():
    """Whether this torch has oneDNN's inner product on an x86 CPU, and it computes what F.linear
    does (checked once on a small product). Elsewhere one row keeps F.linear: not measured there."""
    if platform.machine().lower() not in ("x86_64", "amd64") or not torch.backends.mkldnn.is_available():
        return False
    try:
        g = torch.Generator().manual_seed(0)
        w, x = torch.randn(64, 32, generator=g), torch.randn(1, 1, 32, generator=g)
        return torch.allclose(one_row_linear(x, w), F.linear(x, w), atol=1e-5, rtol=1e-5)
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


def linear(x, weight):
    """F.linear(x, weight) (no bias) for a large fp32 CPU weight, by the path for its number of rows."""
    rows = x.numel() // max(1, x.shape[-1])
    if rows == 1:
        return one_row_linear(x, weight) if onednn_available() and not recorded(x, weight) else F.linear(x, weight)
    if 1 < rows <= FEW_ROWS:
        return few_rows_linear(x, weight)
    return F.linear(x, weight)


def recorded(*tensors):
    """Whether autograd records this product. oneDNN's inner product has no backward: torch would only
    warn, and the weight's gradient would be missing. Generation runs without autograd (inference_mode);
    a learner's own code with gradients keeps F.linear for one row."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def takes(weight):
    """Whether `linear` serves this weight: fp32, on the CPU, 2-D, at least MIN_VALUES values."""
    return (weight.dtype == torch.float32 and weight.device.type == "cpu" and weight.dim() == 2
            and weight.numel() >= MIN_VALUES)


@contextlib.contextmanager
def fast_products(model):
    """While active: the model's large fp32 nn.Linear layers (no bias) and its output layer multiply
    with `linear`; put back after, also when the body raises."""
    layers = [m for m in model.modules() if type(m) is nn.Linear and m.bias is None and takes(m.weight)] \
        if isinstance(model, nn.Module) else []                       # (tests drive generation with stand-ins)
    for m in layers:
        m.forward = functools.partial(_layer, m)
    output = getattr(model, "output_layer", "none") is None and takes(getattr(model, "output_weight", torch.empty(0)))
    if output:
        model.logits = functools.partial(_logits, model)
    try:
        yield
    finally:
        for m in layers:
            m.__dict__.pop("forward", None)
        if output:
            model.__dict__.pop("logits", None)


def _layer(module, x):
    return linear(x, module.weight)


def _logits(model, h):
    return linear(h, model.output_weight).float()                    # as Qwen35.logits: (..., vocab) fp32
