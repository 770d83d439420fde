"""The engine's quantized models: torch's weight-only CPU kernels behind qwen/quant.py's seam, and
load_quantized, which quantizes while it reads the checkpoint (chapter 13; main.py 9 / chat --quant).

Kernels. qwen/quant.py computes a quantized layer the plain way: dequantize, then an fp32 matmul,
which saves memory but not time (the fp32 weight is rebuilt at every call). torch has CPU kernels
that read the small codes directly: torch._weight_int8pack_mm (int8, a scale per row) and
aten._weight_int4pack_mm_for_cpu (4-bit, on the tiled layout aten._convert_weight_to_int4pack_for_cpu
makes, which depends on the CPU's vector width). `with kernels():` installs them as quant.kernel's
TorchKernels: a layer made with kernel=True inside takes their layout where the shape fits (int8:
inputs a multiple of INT8_KERNEL_IN; 4-bit: groups of 32..256, rows a multiple of 16), else the
plain path. They are fast with bf16 activations and scales only, on CPUs with native bf16
(AVX512-BF16, AMX) as on those without (AVX2): an fp32 x is many times slower. So x and the scales
go in as bf16 and the result comes back in bf16 (the layer casts it to x's dtype): it differs from
the fp32 plain path by bf16's rounding of x, of the scales and of the result (about 0.4% of a
value). int8 with more than KERNEL_ROWS rows at once (a prompt) is declined, so it takes the plain
path: an fp32 matmul beats the kernel there. A 4-bit layer in the kernel's layout keeps no plain
copy of its codes, so a prompt goes through the kernel too.

Loading. quantize_model(load_model(path), mode) holds the full-precision model first. load_quantized
reads each weight it quantizes from the file ROWS_AT_ONCE rows at a time (StoredRows) and loads the
rest as load_model does, so the process peaks near the quantized model's size, not at the stored
bf16 model's plus the quantized one's: the same numbers as quantize_model's (tests/test_quant.py).
"""
import ctypes
import ctypes.util
from pathlib import Path

import torch

from qwen import quant
from qwen.config import Config
from qwen.files import open_file
from qwen.lang import QwenError
from qwen.model import VISUAL, Qwen35, _Converted, _read_exactly
from qwen.vision import VisionConfig, VisionModel
from qwen.weights import load, load_weights

INT4_KERNEL_GROUPS = (32, 64, 128, 256)      # the group sizes torch's 4-bit CPU kernel accepts
INT8_KERNEL_IN = 8                           # int8: the kernel reads rows 8 weights at a time (torch 2.13, CPU:
                                             # in_features 4, 12, 100, 130 give numbers ~1e31 or a segfault)
KERNEL_ROWS = 32                             # int8: up to this many rows (tokens) a call through the kernel
BF16_ROUNDING = 2.0 ** -8                    # bf16 keeps 8 significant bits: rounding moves a value by <= 2^-8 of it


def _flat(x):
    """x (..., in) -> (rows, in) bf16, contiguous: the kernels take a 2-D bf16 matrix."""
    return x.reshape(-1, x.shape[-1]).to(torch.bfloat16).contiguous()


def _int4_kernel_fits(out, n_in, g):
    ops = torch.ops.aten
    return (hasattr(ops, "_weight_int4pack_mm_for_cpu") and hasattr(ops, "_convert_weight_to_int4pack_for_cpu")
            and g in INT4_KERNEL_GROUPS and out % 16 == 0 and n_in % g == 0)


class TorchKernels(quant.Kernels):
    """torch's weight-only CPU kernels, for qwen/quant.py's Int8Linear and Int4Linear."""

    def layout(self, kind, q, scale):
        out, n_in = q.shape
        if kind == "int8":                                                  # the codes as they are, bf16 scales
            if not hasattr(torch, "_weight_int8pack_mm") or n_in % INT8_KERNEL_IN:
                return None
            return {"scale_bf16": scale.to(torch.bfloat16)}
        if not _int4_kernel_fits(out, n_in, n_in // scale.shape[1]):
            return None
        u = (q.to(torch.int32) + 8).contiguous()                            # 0..15, (out, in)
        scale = scale.to(torch.bfloat16)
        return {"packed": torch.ops.aten._convert_weight_to_int4pack_for_cpu(u, 1),   # the kernel's own tiling
                "scale_zero": torch.stack((scale.T, torch.zeros_like(scale.T)), -1).contiguous()}
        #                     (groups, out, 2) bf16: a scale and a zero (0) per group; the kernel computes
        #                     (u - 8) * scale + zero for u = q + 8

    def product(self, layer, x):
        if isinstance(layer, quant.Int8Linear):
            if x.numel() > KERNEL_ROWS * x.shape[-1]:                       # a prompt: the fp32 matmul is faster
                return None
            y = torch._weight_int8pack_mm(_flat(x), layer.q, layer.scale_bf16)          # (rows, out) bf16
        else:
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(_flat(x), layer.packed, layer.group, layer.scale_zero)
        return y.reshape(*x.shape[:-1], -1).to(x.dtype)                     # (..., out)


TORCH = TorchKernels()


def kernels():
    """`with kernels():` quantized layers made inside (kernel=True) compute with torch's kernels."""
    return quant.kernel(TORCH)


def check_mode(mode, speculative=None, mine=False):
    """'int8' or 'int4', else one line naming --quant; also one line for the options it does not go with."""
    if mode not in quant.MODES:
        raise QwenError("--quant {m}: choose int8 (8 bits a weight, a scale per row) or int4 (4 bits, a scale per "
                        "group of {g}), or leave the option out for fp32.",
                        "--quant {m}：请选 int8（每个权重 8 位，每行一个缩放因子）或 int4（4 位，每 {g} 个一组一个缩放因子），"
                        "或者不加这个选项（fp32）。", m=mode, g=quant.GROUP)
    if speculative is not None:
        raise QwenError("--quant and --speculative do not go together: speculative decoding drafts with the "
                        "full-precision output layer. Choose one.",
                        "--quant 和 --speculative 不能同时用：推测解码用全精度的输出层起草。请二选一。")
    if mine:
        raise QwenError("--quant and --mine do not go together: your solved exercises compute with full-precision "
                        "weights, which --quant replaces. Choose one.",
                        "--quant 和 --mine 不能同时用：你解出的练习用全精度权重计算，而 --quant 替换了这些权重。请二选一。")
    return mode


def weight_bytes(model):
    """Bytes of every tensor the language model holds (parameters and buffers; the rotary tables
    excepted), counted once when two modules share one (the tied table)."""
    seen, total = set(), 0
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if name.startswith(("rotary.", "visual.", "mtp.")) or t.data_ptr() in seen:
            continue
        seen.add(t.data_ptr())
        total += t.nbytes
    return total


class StoredRows:
    """A 2-D weight still in its checkpoint file, read a block of rows at a time with plain file
    reads and converted to fp32: what quant.py's _by_rows quantizes when load_quantized builds a
    layer. The stored weight is never in memory whole, and no page of the file stays mapped (a
    mapped page, once read, counts in the process's resident memory as long as the mapping lives)."""

    def __init__(self, W, name):
        self.W, self.name, self.info = W, name, W.info(name)
        self.shape = self.info.shape                                        # (out, in)
        self._row_bytes = self.info.nbytes // max(self.shape[0], 1)

    def __getitem__(self, rows):
        start, stop, _ = rows.indices(self.shape[0])
        raw = torch.empty(max(stop - start, 0) * self._row_bytes, dtype=torch.uint8)
        with open_file(self.info.file) as f:
            self.W._check_unchanged(self.info.file, f.fileno())            # the file opened at load_weights
            f.seek(self.info.offset + start * self._row_bytes)
            _read_exactly(f, raw.numpy(), self.info)
        return raw.view(self.info.torch_dtype).view(-1, *self.shape[1:]).float()   # (rows, in) fp32


class _LeavingOut(_Converted):
    """load()'s view of the weights, converted to fp32, with `keys` left out: those come back as
    meta tensors of their shape (no byte read), for load_quantized to quantize from the file."""

    def __init__(self, W, keys):
        super().__init__(W, torch.float32)
        self.left_out = keys

    def __getitem__(self, name):
        if name in self.left_out:
            self.read.add(name)
            return torch.empty(self.W.shape(name), device="meta")
        return super().__getitem__(name)


def _malloc_trim():
    """glibc's malloc_trim, or None (macOS, musl, Windows)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _malloc_trim()


def _trim():
    """Hand the heap's free pages back to the system, once a layer. Why: after the first few-MB
    temporary is freed, glibc serves blocks of that size from its heap instead of fresh mappings,
    so the freed temporaries of each block end up as holes between the codes kept: resident,
    unless given back. Once a block instead of once a layer: no lower, and slower (each new
    temporary's pages are then faulted in afresh)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


@torch.no_grad()
def load_quantized(path, mode, vision=False, kernel=True, share=None):
    """quantize_model(load_model(path, vision=vision), mode, kernel) under `kernels()`, without the
    full-precision model in memory at any time: every weight quantize_model would quantize is read
    from the file ROWS_AT_ONCE rows at a time and quantized (StoredRows), the rest loaded strictly as
    load_model does, in fp32. model.stored = (bytes, dtype) of the language-model tensors as stored,
    for "X in bf16 -> Y".

    share: a model load_quantized made from the same checkpoint (with the same kernel choice), whose
    int8 table (the tied embedding / output layer, or an untied lm_head) this one uses instead of
    quantizing the table again: int8 in both modes, the same codes, kept once (chapter 13 holds an
    int8 and an int4 model at once)."""
    check_mode(mode)
    path = Path(path).expanduser()
    cfg, W = Config.load(path), load_weights(path)
    with torch.device("meta"):                                              # shapes only
        model = Qwen35(cfg, dtype=torch.float32)
    table = "embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight"
    todo = {name + ".weight": (parent, attr) for name, parent, attr, _ in quant.projections(model)}
    source = _LeavingOut(W, {*todo, table})
    make = quant.Int8Linear.from_weight if mode == "int8" else quant.Int4Linear.from_weight
    parts = [("embed_tokens", model.embed_tokens)] + [(f"layers.{i}", layer) for i, layer in enumerate(model.layers)]
    parts += [("norm", model.norm)] + ([("lm_head", model.lm_head)] if not cfg.tie_word_embeddings else [])
    with kernels():
        for prefix, module in parts:
            load(module, source, prefix + ".")                              # strict; the weights in todo: meta
            for key in [k for k in todo if k.startswith(prefix + ".")]:     # a layer at a time
                parent, attr = todo[key]
                setattr(parent, attr, make(StoredRows(W, key), kernel=kernel, name=key))
            _trim()
        if cfg.tie_word_embeddings:
            model.embed_tokens = share.embed_tokens if share is not None else \
                quant.Int8Embedding(StoredRows(W, table), kernel=kernel, name=table)
            model.output_layer = model.embed_tokens.table
        else:
            model.lm_head = model.output_layer = share.lm_head if share is not None else \
                quant.Int8Linear.from_weight(StoredRows(W, table), kernel=kernel, name=table)
    vcfg = VisionConfig.from_config(cfg) if vision and W.names_under(VISUAL) else None
    if vcfg is not None:                                                    # as load_model: fp32, strictly
        with torch.device("meta"):
            model.visual = VisionModel(vcfg, out_hidden=cfg.hidden_size)
        load(model.visual, source, VISUAL)
    for p in model.parameters():                                           # a tensor mapped from the file (one
        p.data = p.data.to(torch.float32, copy=True)                       # already fp32 there) would keep the
    model.unused = sorted(set(W) - source.read)                            # file's mapping alive: copied
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if t.is_meta:
            raise QwenError("{name} was not loaded.", "{name} 没有被加载。", name=name)
    by_dtype = {}
    for name in source.read:
        if not name.startswith(VISUAL):
            info = W.info(name)
            by_dtype[info.dtype] = by_dtype.get(info.dtype, 0) + info.nbytes
    stored = max(by_dtype, key=by_dtype.get)
    model.stored = (sum(by_dtype.values()), {"BF16": "bf16", "F32": "fp32", "F16": "fp16"}.get(stored, stored))
    model.requires_grad_(False)
    model.path, model.quant, model.mtp = path, mode, None
    return model.eval()
