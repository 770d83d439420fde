"""A faster bf16 prompt pass: the projections of a long prompt computed in fp32 (issue 24).

Why: on a CPU without native bf16 (AVX2, no AVX-512 BF16 / AMX), torch's bf16 matmul converts
every product to fp32 and runs far below its fp32 matmul. For many rows at once it pays to
convert the weight to fp32 first (once per call: a 3584 x 1024 weight is 3.7 M values, a few ms)
and run the fp32 matmul; the result is rounded to bf16 once, as bf16's own matmul does (it
accumulates in fp32 too), so the numbers agree to a bf16 rounding step. bench/bench_model.py
measures it (full-size model, 512-token prompt, 1 thread, CPU seconds): bf16's own matmuls 4.7x
fp32's time, through this pass 1.05x. Below MIN_ROWS rows the conversion costs more than it saves
(the whole model, 1 thread: 2.9x slower at 1 row, 1.3x at 4, 0.84x at 8, 0.50x at 32), so
decoding (one row) keeps bf16's own matrix-vector product.

How it is wired in: `prompt_pass(model)` is the context generation reads a prompt in
(qwen/generate.py generate_ids, so generate, Chat and chapter 9; qwen/mtp.py's speculative
prefill). It acts only on a bf16 model (`load_model(path, dtype=torch.bfloat16)`, `main.py 9 --dtype
bfloat16`); `main.py chat` loads fp32, where it does nothing. Inside it, a torch function mode (`PromptPass`) sees every F.linear call
and sends those of a bf16 weight with at least `MIN_ROWS` rows to `linear` below; every other
call runs as it is. The model is not changed: no module is replaced or wrapped, so what a
learner prints or reads (model.py, the chapters' nn.Linear) is the plain model, and calling the
model directly (chapter 8) stays the plain bf16 path. tests/test_upcast.py checks the two
against each other.

Memory: nothing is kept. One weight at a time exists in fp32, during its own call: the largest
is in_proj_qkv, 6144 x 1024 (25 MB); the output layer (248,320 x 1024, 1 GB in fp32) is never
converted (`MAX_WEIGHT`): generation computes its logits for one row only. Measured: the 512-token
pass raised the peak RSS by 117 MB (fp32's own pass: 87 MB).
"""
import contextlib
import functools
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

MIN_ROWS = 8                                  # rows (tokens) from which a bf16 projection runs in fp32
MAX_WEIGHT = 1 << 25                          # weights up to this many values are converted (128 MB in fp32)
NATIVE_BF16 = {"avx512_bf16", "amx_bf16", "bf16"}  # /proc/cpuinfo flags of bf16 arithmetic (x86; ARM's "bf16")


def linear(x, weight, bias=None):
    """F.linear(x, weight, bias) for bf16 tensors, computed in fp32 and rounded to x's dtype once."""
    out = F.linear(x.float(), weight.float(), None if bias is None else bias.float())   # (..., out) fp32
    return out.to(x.dtype)


def pays(x, weight, min_rows=MIN_ROWS):
    """Whether `linear` is the faster way for this call: a bf16 CPU weight, not the output layer,
    and at least min_rows rows of input."""
    return (weight.dtype == torch.bfloat16 and x.dtype == torch.bfloat16 and weight.device.type == "cpu"
            and weight.dim() == 2 and weight.numel() <= MAX_WEIGHT and x.numel() >= min_rows * weight.shape[1])


class PromptPass(TorchFunctionMode):
    """While active: F.linear calls that `pays` for go to `linear`; every other call is unchanged."""

    def __init__(self, min_rows=MIN_ROWS):
        super().__init__()
        self.min_rows = min_rows

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear and len(args) >= 2 and pays(args[0], args[1], self.min_rows) and \
                _same_dtype_bias(args[2] if len(args) > 2 else kwargs.get("bias"), args[1]):
            return linear(*args, **kwargs)
        return func(*args, **kwargs)


def _same_dtype_bias(bias, weight):
    """No bias, or one of the weight's dtype: a bias of another dtype is an error in bf16's own F.linear,
    and `linear` (everything in fp32) would let it through, so that call runs as it is and raises."""
    return bias is None or getattr(bias, "dtype", None) == weight.dtype


def native_bf16(cpuinfo):
    """Whether /proc/cpuinfo's text lists bf16 arithmetic: x86's avx512_bf16 or amx_bf16, ARM's bf16."""
    return bool(NATIVE_BF16 & set(cpuinfo.split()))


@functools.lru_cache(maxsize=1)
def emulated_bf16():
    """True unless this CPU has bf16 arithmetic (`native_bf16`). Without it every bf16 product is
    converted to fp32; with it, bf16's own matmul may well be the faster one (not measured here:
    this machine has AVX2 only), so there the plain path is kept."""
    try:
        return not native_bf16(Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace"))
    except OSError:                           # no /proc (macOS, Windows): assume no bf16 arithmetic
        return True


def prompt_pass(model, min_rows=None):
    """The context to read a prompt in: a PromptPass for a model with bf16 projections on a CPU
    that emulates bf16, else one that does nothing. min_rows: default MIN_ROWS (read at the call)."""
    modules = model.modules() if isinstance(model, nn.Module) else ()   # (tests drive generation with stand-ins)
    bf16 = any(isinstance(m, nn.Linear) and m.weight.dtype == torch.bfloat16 and m.weight.device.type == "cpu"
               for m in modules)
    if not bf16 or not emulated_bf16():
        return contextlib.nullcontext()
    return PromptPass(MIN_ROWS if min_rows is None else min_rows)
