"""A bf16 prompt's products computed in fp32: the engine's path for long bf16 inputs (engine/products.py).

Why: on a CPU without bf16 arithmetic (no AVX-512 BF16, AMX or ARM's bf16), torch's bf16 matmul
converts every product to fp32 and runs far below its fp32 matmul. For many rows at once it pays
to convert the weight to fp32 first (once per call) and run the fp32 matmul. The result is rounded
to bf16 once, as bf16's own matmul does (it accumulates in fp32 too), so the numbers agree to a
bf16 rounding step. Below MIN_ROWS rows the conversion costs more than it saves, so decoding (one
row) keeps bf16's own matrix-vector product. bench/bench_model.py measures both ways.

Memory: nothing is kept. One weight at a time exists in fp32, during its own call; weights over
MAX_WEIGHT values (the output layer: 248,320 x 1024) are never converted, and generation computes
their product for one row only.
"""
import functools
from pathlib import Path

import torch
import torch.nn.functional as F

MIN_ROWS = 8                                  # rows (tokens) from which a bf16 projection runs in fp32
MAX_WEIGHT = 1 << 25                          # weights up to this many values are converted (128 MB in fp32)
NATIVE_BF16 = {"avx512_bf16", "amx_bf16", "bf16"}  # /proc/cpuinfo flags of bf16 arithmetic (x86; ARM's "bf16")


def linear(x, weight, bias=None):
    """F.linear(x, weight, bias) for bf16 tensors, computed in fp32 and rounded to x's dtype once."""
    out = F.linear(x.float(), weight.float(), None if bias is None else bias.float())   # (..., out) fp32
    return out.to(x.dtype)


def pays(x, weight, bias=None):
    """Whether `linear` is the faster way for this call: bf16 x and weight on a CPU that emulates
    bf16, the weight 2-D and at most MAX_WEIGHT values, at least MIN_ROWS rows, no gradient wanted,
    and no bias or a bf16 one (a bias of another dtype is an error in bf16's own F.linear, which
    `linear` would let through: that call runs as it is, and raises)."""
    return (weight.dtype == torch.bfloat16 and x.dtype == torch.bfloat16 and weight.device.type == "cpu"
            and x.is_cpu and weight.dim() == 2 and weight.numel() <= MAX_WEIGHT and x.dim() > 0
            and x.shape[-1] == weight.shape[1] and x.numel() >= MIN_ROWS * weight.shape[1]
            and (bias is None or bias.dtype == weight.dtype)
            and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
            and emulated_bf16())


def native_bf16(cpuinfo):
    """Whether /proc/cpuinfo's text lists bf16 arithmetic: x86's avx512_bf16 or amx_bf16, ARM's bf16."""
    return bool(NATIVE_BF16 & set(cpuinfo.split()))


@functools.lru_cache(maxsize=1)
def emulated_bf16():
    """True unless this CPU has bf16 arithmetic (`native_bf16`). With it, bf16's own matmul may well be
    the faster one (not measured), so there the plain path is kept."""
    try:
        return not native_bf16(Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace"))
    except OSError:                           # no /proc (macOS, Windows): assume no bf16 arithmetic
        return True
