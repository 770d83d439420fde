"""Weight-only quantization by hand: int8 per output channel, 4-bit in groups (chapter 13).

Why: decoding one token reads every weight once and does two flops with each, so a CPU spends
the step waiting for memory, not computing (bench/bench_model.py measures it). Fewer bytes per
weight is fewer bytes to read: fp32 4, bf16 2, int8 1 (+ one scale per row), 4-bit 0.5 (+ one
scale per group of 128). Only the weights are stored in fewer bits; the activations, norms,
the delta rule and attention stay fp32 ("weight-only" quantization).

Symmetric absmax quantization of a row w (one output channel, one row of a Linear's weight):

    scale = max |w| / 127                  the largest weight maps to +-127
    q     = clamp(round(w / scale), -127, 127)           int8 codes
    w'    = q * scale                       what the model computes with (dequantized)

Every weight moves by at most scale / 2 (rounding to the nearest code). One scale per ROW, not
per tensor: a row of small weights next to a row with one outlier would otherwise get the
outlier's coarse steps. 4-bit has 16 codes (-8..7; we use -7..7, symmetric): too few for a
whole row of 1024, so each row is cut into groups of GROUP = 128 consecutive weights with a
scale each (0.25 extra bits per weight with an fp32 scale; groups of 32 would cost 1 extra
bit, half the savings of going from 8 to 4 bits, for an error only somewhat smaller; chapter
13 measures both).

Which layers: every projection of the 24 decoder layers (q, k, v, o; in_proj_qkv, in_proj_z,
out_proj; gate, up, down) and the tied embedding / output layer (248,320 x 1024: a third of
the parameters, and the largest matmul of a decode step). The embedding table is stored once,
int8 per row, and used both ways: a token's row dequantized for the input, the whole table
for the logits. In "int4" mode the projections are 4-bit and this table stays int8, as
llama.cpp's q4_k_m keeps its output layer at more bits: every logit goes through it. Kept in
fp32: the norms, the DeltaNet's conv, A_log, dt_bias and in_proj_a / in_proj_b (16 rows each:
they set the decay and beta, an exponent, for 0.03% of the parameters), the vision tower.

Two ways to compute with a quantized weight, tested equal (tests/test_quant.py):
  - plain: dequantize, then an fp32 matmul. Three lines a learner reads; it saves memory, not
    time (the fp32 weight is rebuilt at every call).
  - kernel: torch's CPU weight-only kernels (torch._weight_int8pack_mm;
    aten._weight_int4pack_mm_for_cpu on the layout aten._convert_weight_to_int4pack_for_cpu
    makes), which read the small codes directly. Used where torch has them and the shape fits
    (4-bit: groups of 32..256, rows a multiple of 16); else the plain path. They are fast with
    bf16 activations and scales only, on CPUs with native bf16 (AVX512-BF16, AMX) as on those
    without (AVX2): an fp32 x is tens of times slower than a bf16 one. So x and the scales go in
    as bf16 and the result comes back in bf16 (the layer casts it to x's dtype): it differs from
    the fp32 plain path by bf16's rounding of x, of the scales and of the result (about 0.4% of a
    value). int8 with more than KERNEL_ROWS rows at once (a prompt)
    takes the plain path: an fp32 matmul beats the kernel there (512 rows: 188 ms against 311).

Two ways to get a quantized model, the same numbers (tested): quantize_model(model, mode) on a
loaded model (chapter 13, which compares it with its fp32 self), and load_quantized(path, mode),
which main.py 9 / chat --quant use: each weight to quantize is read from the file a block of
ROWS_AT_ONCE rows at a time and quantized, so the process never holds the full-precision model
(full size, int8: peak RSS 979 MiB, 220 of them torch's, against 2,512 MiB loading the bf16 model first).
"""
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from qwen.files import open_file
from qwen.lang import QwenError

MODES = ("int8", "int4")
GROUP = 128                                  # 4-bit: weights per scale, along the input dimension
INT4_KERNEL_GROUPS = (32, 64, 128, 256)      # the group sizes torch's 4-bit CPU kernel accepts
KEEP_FP32 = ("in_proj_a", "in_proj_b")       # tiny, and they feed an exponent (the decay) and beta
INT8_KERNEL_IN = 8                           # int8: the kernel reads rows 8 weights at a time (torch 2.13, CPU:
                                             # in_features 4, 12, 100, 130 gave numbers ~1e31 or a segfault)
KERNEL_ROWS = 32                             # int8: up to this many rows (tokens) a call through the kernel
BF16_ROUNDING = 2.0 ** -8                    # bf16 keeps 8 significant bits: rounding moves a value by <= 2^-8 of it
ROWS_AT_ONCE = 1024                          # weight rows quantized (or dequantized) at a time: a few MB of temporaries


# --------------------------------------------------------------------------------------------
# By hand: quantize, dequantize, pack
# --------------------------------------------------------------------------------------------

def quantize_int8(w):
    """w (out, in) float -> codes (out, in) int8 in -127..127, scale (out,) fp32: absmax per row."""
    w = w.float()
    scale = w.abs().amax(dim=1) / 127                                     # (out,)
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)        # an all-zero row: 1 (any scale gives q = 0)
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)   # (out, in)
    return q, scale


def dequantize_int8(q, scale):
    """codes (out, in) int8, scale (out,) -> (out, in) fp32: q * scale."""
    return q.float() * scale[:, None]


def group_size(n_in, group=GROUP):
    """The 4-bit group along an input of n_in: `group`, or the largest power of two dividing both
    (the tiny checkpoint's 16-wide rows get groups of 16)."""
    g = group
    while n_in % g:
        g //= 2
    return g


def quantize_int4(w, group=GROUP):
    """w (out, in) float -> codes (out, in) int8 in -7..7, scale (out, in / group) fp32.

    Symmetric absmax per group: the largest weight of a group maps to +-7 (-8 is never used:
    one of 16 codes given up so that 0 stays exactly 0 and the range is the same both ways)."""
    out, n_in = w.shape
    g = group_size(n_in, group)
    wg = w.float().reshape(out, n_in // g, g)                             # (out, groups, g)
    scale = wg.abs().amax(dim=-1) / 7                                     # (out, groups)
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)        # an all-zero group: 1
    q = torch.round(wg / scale[..., None]).clamp(-7, 7).to(torch.int8)
    return q.reshape(out, n_in), scale


def dequantize_int4(q, scale):
    """codes (out, in) in -7..7, scale (out, groups) -> (out, in) fp32."""
    out, n_in = q.shape
    g = n_in // scale.shape[1]
    return (q.float().reshape(out, -1, g) * scale[..., None]).reshape(out, n_in)


def pack_int4(q):
    """codes (out, in) in -8..7 -> (out, in / 2) uint8: two codes a byte, each stored as q + 8
    (0..15), the even column in the low 4 bits, the odd one in the high 4."""
    if q.shape[-1] % 2:
        raise QwenError("4-bit codes are packed two a byte: a weight with {n} inputs (an odd number) cannot be; "
                        "use int8 for it.", "4 位编码两个一字节打包：输入数为 {n}（奇数）的权重无法打包；请对它用 int8。",
                        n=q.shape[-1])
    u = (q.to(torch.int16) + 8).to(torch.uint8)                           # 0..15
    return u[:, 0::2] | (u[:, 1::2] << 4)                                 # (out, in / 2)


def unpack_int4(packed):
    """(out, in / 2) uint8 -> codes (out, in) int8 in -8..7: pack_int4 undone."""
    low = (packed & 0xF).to(torch.int8) - 8
    high = (packed >> 4).to(torch.int8) - 8
    return torch.stack((low, high), dim=-1).reshape(packed.shape[0], -1)  # columns back in order


def within_half_step(w, w_hat, step):
    """True when every |w - w_hat| is at most half its row's step (step: (out,) or (out, groups)
    broadcast over the row or group), up to fp32's own rounding.

    In exact arithmetic rounding to the nearest code moves a weight by at most step / 2. In fp32,
    w / step and q * step are each rounded to the nearest float, a relative error of up to eps / 2
    each (eps = 2^-23), so |w - w_hat| can exceed step / 2 by about eps / 2 * (|w| + |w_hat|): at
    |w| = 0.1 that is 6e-9, more than a fixed slack like 1e-9 allows. The slack here is that bound
    twice over: eps * (|w| + |w_hat|), still a millionth of a step."""
    w, w_hat = w.float(), w_hat.float()
    half = step.float() / 2
    half = half[:, None] if half.dim() == 1 else half.repeat_interleave(w.shape[1] // half.shape[1], dim=1)
    slack = torch.finfo(torch.float32).eps * (w.abs() + w_hat.abs())
    return bool(((w - w_hat).abs() <= half + slack).all())


def error(w, w_hat):
    """{'max': largest |w - w_hat|, 'rms': root mean square of w - w_hat, 'rel': rms / rms(w)}."""
    d = (w.float() - w_hat.float())
    rms = float(d.pow(2).mean().sqrt())
    return {"max": float(d.abs().max()), "rms": rms, "rel": rms / max(float(w.float().pow(2).mean().sqrt()), 1e-30)}


# --------------------------------------------------------------------------------------------
# Layers that compute with quantized weights
# --------------------------------------------------------------------------------------------

def _by_rows(quantize, w, *args, name=None):
    """quantize(w, *args) a block of rows at a time, joined: each row is quantized on its own, so
    this is the same result, without fp32 temporaries of the whole weight (the 248,320-row table
    is 1 GB in fp32, and a few temporaries of it would be several). w may be a tensor or a
    StoredRows (a weight still in its file). A NaN or an infinity stops it with one line naming
    `name` (the weight), its file (a StoredRows') and the row: that row's scale, and so every code
    of it, would mean nothing."""
    file = getattr(getattr(w, "info", None), "file", None)                  # a StoredRows: the checkpoint file
    q = scale = None
    for i in range(0, w.shape[0], ROWS_AT_ONCE):                            # written in place: no small results
        rows = w[i:i + ROWS_AT_ONCE]                                        # kept between the freed temporaries
        q_rows, s_rows = quantize(rows, *args)                              # (glibc's heap then grew by GBs)
        _check_finite(rows, s_rows, name, i, file)
        if q is None:
            q = torch.empty(w.shape, dtype=q_rows.dtype)
            scale = torch.empty((w.shape[0], *s_rows.shape[1:]), dtype=s_rows.dtype)
        q[i:i + ROWS_AT_ONCE], scale[i:i + ROWS_AT_ONCE] = q_rows, s_rows
    return q, scale


def _check_finite(rows, scale, name, first, file=None):
    """One line for a NaN or an infinity in rows (a block starting at row `first` of the weight `name`,
    read from `file` if given): read on the scales, which are one per row (or group) and NaN or inf
    where a weight of theirs is."""
    bad_rows = ~torch.isfinite(scale.reshape(scale.shape[0], -1)).all(dim=1)   # (rows,)
    if bad_rows.any():
        row = int(bad_rows.nonzero()[0, 0])
        value = rows[row][~torch.isfinite(rows[row])][0].item()
        row += first
        raise QwenError("{who_en}: row {row} holds {v}: only finite numbers can be quantized (that row's scale, and "
                        "so every code of it, would mean nothing). Download the checkpoint again, or find where "
                        "that value came from.",
                        "{who_zh}：第 {row} 行含有 {v}：只有有限的数才能量化（否则这一行的缩放因子以及它的每个编码都"
                        "没有意义）。请重新下载检查点，或者查明这个值从哪里来。",
                        who_en=f"{file}: {name}" if file else name or "this weight",
                        who_zh=f"{file}：{name}" if file else name or "这个权重", row=row, v=value)


def _flat(x):
    """x (..., in) -> (rows, in) bf16, contiguous: the kernels take a 2-D bf16 matrix."""
    return x.reshape(-1, x.shape[-1]).to(torch.bfloat16).contiguous()


class Int8Linear(nn.Module):
    """y = x @ (q * scale).T with q int8 (out, in) and one fp32 scale per output row.

    kernel=True: torch._weight_int8pack_mm, which reads the int8 codes directly, for up to
    KERNEL_ROWS rows, where in_features is a multiple of INT8_KERNEL_IN; False: the plain path,
    dequantize then matmul, always."""

    def __init__(self, q, scale, kernel=True):
        super().__init__()
        self.register_buffer("q", q.contiguous())                           # (out, in) int8
        self.register_buffer("scale", scale.float().contiguous())            # (out,)
        self.kernel = kernel and hasattr(torch, "_weight_int8pack_mm") and q.shape[1] % INT8_KERNEL_IN == 0
        if self.kernel:
            self.register_buffer("scale_bf16", self.scale.to(torch.bfloat16))   # what the kernel takes

    @classmethod
    def from_weight(cls, w, kernel=True, name=None):
        """w (out, in): a tensor, or a StoredRows; name: the weight's, for a message."""
        return cls(*_by_rows(quantize_int8, w, name=name), kernel=kernel)

    in_features = property(lambda self: self.q.shape[1])                    # as nn.Linear has them
    out_features = property(lambda self: self.q.shape[0])

    @property
    def nbytes(self):
        return sum(b.nbytes for b in self.buffers())                         # codes, scales (and their bf16 copy)

    def dequantized(self):
        return dequantize_int8(self.q, self.scale)                           # (out, in) fp32

    def forward(self, x):
        if not self.kernel or x.numel() > KERNEL_ROWS * x.shape[-1]:
            return self.plain(x)
        y = torch._weight_int8pack_mm(_flat(x), self.q, self.scale_bf16)     # (rows, out) bf16
        return y.reshape(*x.shape[:-1], -1).to(x.dtype)

    def plain(self, x):
        """Dequantize, then an fp32 matmul, ROWS_AT_ONCE output rows at a time: the 248,320-row
        table would be 1 GB in fp32, rebuilt whole at every call. Each block's result goes into
        its columns of one output made first: kept blocks allocated between the freed temporaries
        would leave holes the next block's temporaries do not fit (glibc's heap grew by 1 GB)."""
        x32 = x.float()
        y = x32.new_empty((*x.shape[:-1], self.out_features))               # (..., out)
        for i in range(0, self.out_features, ROWS_AT_ONCE):
            y[..., i:i + ROWS_AT_ONCE] = F.linear(x32, dequantize_int8(self.q[i:i + ROWS_AT_ONCE],
                                                                       self.scale[i:i + ROWS_AT_ONCE]))
        return y.to(x.dtype)

    def extra_repr(self):
        return f"in={self.q.shape[1]}, out={self.q.shape[0]}, kernel={self.kernel}"


def _int4_kernel_fits(out, n_in, g):
    ops = torch.ops.aten
    return (hasattr(ops, "_weight_int4pack_mm_for_cpu") and hasattr(ops, "_convert_weight_to_int4pack_for_cpu")
            and g in INT4_KERNEL_GROUPS and out % 16 == 0 and n_in % g == 0)


class Int4Linear(nn.Module):
    """y = x @ dequantize_int4(q, scale).T, 4-bit codes in groups along the input.

    Stored packed, two codes a byte: by hand (pack_int4) for the plain path, or in the layout of
    torch's 4-bit CPU kernel (its own tiling), with the scales as its (groups, out, 2) scale and
    zero table (zero = 0: symmetric; the kernel computes (u - 8) * scale + zero for u = q + 8).
    The kernel path keeps no plain copy of the codes (it would double the bytes), so a prompt goes
    through the kernel too."""

    def __init__(self, q, scale, kernel=True):
        super().__init__()
        out, n_in = q.shape
        self.shape, self.group = (out, n_in), n_in // scale.shape[1]
        self.kernel = kernel and _int4_kernel_fits(out, n_in, self.group)
        if self.kernel:
            u = (q.to(torch.int32) + 8).contiguous()                         # 0..15, (out, in)
            self.register_buffer("packed", torch.ops.aten._convert_weight_to_int4pack_for_cpu(u, 1))
            scale = scale.to(torch.bfloat16)
            self.register_buffer("scale_zero", torch.stack((scale.T, torch.zeros_like(scale.T)), -1).contiguous())
            #                                   (groups, out, 2) bf16: a scale and a zero (0) per group
        else:
            self.register_buffer("packed", pack_int4(q))                     # (out, in / 2) uint8
            self.register_buffer("scale", scale.float().contiguous())        # (out, groups)

    @classmethod
    def from_weight(cls, w, kernel=True, group=GROUP, name=None):
        return cls(*_by_rows(quantize_int4, w, group, name=name), kernel=kernel)

    in_features = property(lambda self: self.shape[1])
    out_features = property(lambda self: self.shape[0])

    @property
    def nbytes(self):
        return sum(b.nbytes for b in self.buffers())

    def dequantized(self):
        if self.kernel:                                                      # the kernel's own layout: ask it
            eye = torch.eye(self.shape[1], dtype=torch.bfloat16)             # (in, in): rows of I give columns
            return torch.ops.aten._weight_int4pack_mm_for_cpu(eye, self.packed, self.group, self.scale_zero).T.float()
        return dequantize_int4(unpack_int4(self.packed), self.scale)        # (out, in) fp32

    def forward(self, x):
        if not self.kernel:
            return F.linear(x.float(), self.dequantized()).to(x.dtype)      # the plain path
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(_flat(x), self.packed, self.group, self.scale_zero)
        return y.reshape(*x.shape[:-1], -1).to(x.dtype)                      # (..., out)

    def extra_repr(self):
        return f"in={self.shape[1]}, out={self.shape[0]}, group={self.group}, kernel={self.kernel}"


class Int8Embedding(nn.Module):
    """The tied embedding table as int8 rows with a scale each: looked up (a row dequantized per
    token) and used as the output layer (Int8Linear on the same buffers: stored once)."""

    def __init__(self, weight, kernel=True, name="embed_tokens.weight"):
        super().__init__()
        self.table = Int8Linear.from_weight(weight, kernel=kernel, name=name)   # (vocab, hidden) codes

    def forward(self, ids):
        vocab = self.table.q.shape[0]
        if ids.numel() and (ids.min() < 0 or ids.max() >= vocab):
            bad = ids[(ids < 0) | (ids >= vocab)][0].item()
            raise QwenError("Token id {i} is outside the embedding table (rows 0..{top}).",
                            "词元编号 {i} 超出了嵌入表的范围（行 0..{top}）。", i=bad, top=vocab - 1)
        return self.table.q[ids].float() * self.table.scale[ids][..., None]   # (..., hidden) fp32


# --------------------------------------------------------------------------------------------
# A whole model
# --------------------------------------------------------------------------------------------

def check_mode(mode, speculative=None, mine=False):
    """'int8' or 'int4', else one line naming --quant; also one line for the options it does not go with."""
    if mode not in MODES:
        raise QwenError("--quant {m}: choose int8 (8 bits a weight, a scale per row) or int4 (4 bits, a scale per "
                        "group of {g}), or leave the option out for fp32.",
                        "--quant {m}：请选 int8（每个权重 8 位，每行一个缩放因子）或 int4（4 位，每 {g} 个一组一个缩放因子），"
                        "或者不加这个选项（fp32）。", m=mode, g=GROUP)
    if speculative is not None:
        raise QwenError("--quant and --speculative do not go together: speculative decoding drafts with the "
                        "full-precision output layer. Choose one.",
                        "--quant 和 --speculative 不能同时用：推测解码用全精度的输出层起草。请二选一。")
    if mine:
        raise QwenError("--quant and --mine do not go together: your solved exercises compute with full-precision "
                        "weights, which --quant replaces. Choose one.",
                        "--quant 和 --mine 不能同时用：你解出的练习用全精度权重计算，而 --quant 替换了这些权重。请二选一。")
    return mode


def projections(model):
    """[(name, parent module, attribute, nn.Linear)] of every projection quantize_model replaces."""
    found = []
    for name, module in model.layers.named_modules():
        for attr, child in module.named_children():
            if isinstance(child, nn.Linear) and attr not in KEEP_FP32:
                found.append((f"layers.{name}.{attr}", module, attr, child))
    return found


@torch.no_grad()
def quantize_model(model, mode, kernel=True):
    """Quantize a loaded Qwen35 in place and return it: every projection of the decoder layers
    to `mode` ("int8": per row; "int4": groups of GROUP), the output layer to int8 (the tied
    embedding table, stored once for both uses; an untied lm_head likewise). One layer at a time,
    so the fp32 weights are freed as they are replaced. The MTP head is dropped (model.mtp =
    None): speculative decoding drafts with the full-precision output layer. What stays a
    parameter (norms, conv, decay) is made fp32, so a model loaded as stored (load_model(path,
    dtype=None): bf16, mapped from the file, half the bytes of fp32 while it is quantized) gives
    the same model as one loaded in fp32 (bf16 -> fp32 is exact).

    kernel=False: every layer on the plain dequantize-then-matmul path."""
    check_mode(mode)
    if getattr(model, "quant", None):                                      # its fp32 weights are gone
        raise QwenError("This model is already quantized ({q}): load it again (load_model) to quantize it to {m}.",
                        "这个模型已经量化过了（{q}）：请重新加载（load_model）再量化成 {m}。", q=model.quant, m=mode)
    make = Int8Linear.from_weight if mode == "int8" else Int4Linear.from_weight
    for name, parent, attr, linear in projections(model):
        setattr(parent, attr, make(linear.weight.data, kernel=kernel, name=name + ".weight"))
    if model.cfg.tie_word_embeddings:
        model.embed_tokens = Int8Embedding(model.embed_tokens.weight.data, kernel=kernel)
        model.output_layer = model.embed_tokens.table
    else:
        model.lm_head = Int8Linear.from_weight(model.lm_head.weight.data, kernel=kernel, name="lm_head.weight")
        model.output_layer = model.lm_head
    for p in model.parameters():                                           # the rest: fp32, copied: a tensor
        p.data = p.data.to(torch.float32, copy=True)                       # mapped from the file would keep
                                                                           # the whole file's mapping alive
    model.mtp = None
    model.quant = mode
    return model


# --------------------------------------------------------------------------------------------
# Quantized while loading: the bf16 model never in memory
# --------------------------------------------------------------------------------------------

class StoredRows:
    """A 2-D weight still in its checkpoint file, read a block of rows at a time with plain file
    reads and converted to fp32: what _by_rows quantizes when load_quantized builds a layer. The
    stored weight is never in memory whole (the table alone is 508 MB in bf16), and no page of
    the file stays mapped (a mapped page, once read, counts in the process's resident memory for
    as long as the mapping lives)."""

    def __init__(self, W, name):
        self.W, self.name, self.info = W, name, W.info(name)
        self.shape = self.info.shape                                        # (out, in)
        self._row_bytes = self.info.nbytes // max(self.shape[0], 1)

    def __getitem__(self, rows):
        from qwen.model import _read_exactly
        start, stop, _ = rows.indices(self.shape[0])
        raw = torch.empty(max(stop - start, 0) * self._row_bytes, dtype=torch.uint8)
        with open_file(self.info.file) as f:
            self.W._check_unchanged(self.info.file, f.fileno())            # the file opened at load_weights
            f.seek(self.info.offset + start * self._row_bytes)
            _read_exactly(f, raw.numpy(), self.info)
        return raw.view(self.info.torch_dtype).view(-1, *self.shape[1:]).float()   # (rows, in) fp32


def _leaving_out(W, keys):
    """load()'s view of the weights, converted to fp32, with `keys` left out: those come back as
    meta tensors of their shape (no byte read), for load_quantized to quantize from the file."""
    from qwen.model import _Converted

    class LeavingOut(_Converted):
        def __getitem__(self, name):
            if name in keys:
                self.read.add(name)
                return torch.empty(self.W.shape(name), device="meta")
            return super().__getitem__(name)

    return LeavingOut(W, torch.float32)


def _trim():
    """Hand the heap's free pages back to the system (glibc's malloc_trim; elsewhere nothing), once a
    layer. Why: after the first few-MB temporary is freed, glibc serves blocks of that size from its
    heap instead of fresh mappings, so the freed temporaries of each block end up as holes between the
    codes kept: resident, 0.35 GB of them by the end of the 24 layers (int8, the full size; peak RSS
    1.33 GB instead of 0.98), unless given back. Once a block instead of once a layer: no lower, and
    slower (each new temporary's pages are then faulted in afresh)."""
    global _malloc_trim
    if _malloc_trim is None:
        import ctypes
        import ctypes.util
        try:
            _malloc_trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
        except (OSError, AttributeError):                                   # not glibc: macOS, musl, Windows
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim = None


@torch.no_grad()
def load_quantized(path, mode, vision=False, kernel=True, share=None):
    """quantize_model(load_model(path, vision=vision), mode, kernel), without the full-precision model
    in memory at any time: every weight quantize_model would quantize is read from the file
    ROWS_AT_ONCE rows at a time and quantized (StoredRows), the rest loaded strictly as load_model
    does, in fp32. The process then peaks near the quantized model's size (plus torch), not at the
    stored bf16 model's plus the quantized one's. The same numbers as quantize_model's (tested).
    model.stored = (bytes, dtype) of the language-model tensors as stored, for "X in bf16 -> Y".

    share: a model load_quantized made from the same checkpoint (with the same kernel choice), whose
    int8 table (the tied embedding / output layer, or an untied lm_head) this one uses instead of
    quantizing the table again: int8 in both modes, the same codes, kept once (chapter 13 holds an
    int8 and an int4 model at once; the table is 254 MB of each at full size)."""
    from qwen.model import VISUAL, Qwen35
    from qwen.vision import VisionConfig, VisionModel
    from qwen.config import Config
    from qwen.weights import load, load_weights
    check_mode(mode)
    path = Path(path).expanduser()
    cfg, W = Config.load(path), load_weights(path)
    with torch.device("meta"):                                              # shapes only
        model = Qwen35(cfg, dtype=torch.float32)
    table = "embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight"
    todo = {name + ".weight": (parent, attr) for name, parent, attr, _ in projections(model)}
    source = _leaving_out(W, {*todo, table})
    make = Int8Linear.from_weight if mode == "int8" else Int4Linear.from_weight
    parts = [("embed_tokens", model.embed_tokens)] + [(f"layers.{i}", layer) for i, layer in enumerate(model.layers)]
    parts += [("norm", model.norm)] + ([("lm_head", model.lm_head)] if not cfg.tie_word_embeddings else [])
    for prefix, module in parts:
        load(module, source, prefix + ".")                                  # strict; the weights in todo: meta
        for key in [k for k in todo if k.startswith(prefix + ".")]:         # a layer at a time
            parent, attr = todo[key]
            setattr(parent, attr, make(StoredRows(W, key), kernel=kernel, name=key))
        _trim()
    if cfg.tie_word_embeddings:
        model.embed_tokens = share.embed_tokens if share is not None else \
            Int8Embedding(StoredRows(W, table), kernel=kernel, name=table)
        model.output_layer = model.embed_tokens.table
    else:
        model.lm_head = model.output_layer = share.lm_head if share is not None else \
            Int8Linear.from_weight(StoredRows(W, table), kernel=kernel, name=table)
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


def main_dtype(model):
    """'bf16' / 'fp32' / 'fp16': the dtype holding most of weight_bytes(model), to say what the
    bytes before quantizing are (chat and chapter 9 quantize from the stored bf16, chapter 13 from fp32)."""
    by_dtype = {}
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if not name.startswith(("rotary.", "visual.", "mtp.")):
            by_dtype[t.dtype] = by_dtype.get(t.dtype, 0) + t.nbytes
    top = max(by_dtype, key=by_dtype.get)
    return {torch.bfloat16: "bf16", torch.float32: "fp32", torch.float16: "fp16"}.get(top, str(top))
