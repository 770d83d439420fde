"""Weight-only quantization by hand: int8 per output channel, 4-bit in groups (chapter 13).

Why: decoding one token reads every weight once and does two flops with each, so a CPU waits
for memory, not for arithmetic. Fewer bytes per weight is fewer bytes to read: fp32 4, int8 1
(+ a scale per row), 4-bit 0.5 (+ a scale per group). Only the weights get fewer bits.

Symmetric absmax quantization of a row w (one output channel, one row of a Linear's weight):

    scale = max |w| / 127                  the largest weight maps to +-127
    q     = clamp(round(w / scale), -127, 127)           int8 codes
    w'    = q * scale                       what the model computes with (dequantized)

Every weight moves by at most scale / 2. One scale per ROW, not per tensor: a row of small
weights next to a row with one outlier would otherwise get the outlier's coarse steps. 4-bit has
16 codes (-8..7; we use -7..7, symmetric): too few for a whole row of 1024, so each row is cut
into groups of GROUP = 128 weights with a scale each (0.25 extra bits per weight; groups of 32
would cost 1 extra bit, half of what going from 8 to 4 bits saves).

Quantized: every projection of the decoder layers, and the tied embedding / output table (int8
in both modes, as llama.cpp's q4_k_m keeps its output layer at more bits: every logit goes
through it). Kept fp32: norms, conv, A_log, dt_bias, in_proj_a / in_proj_b, the vision tower.

Two ways to compute, tested equal to bf16's rounding: plain, dequantize then an fp32 matmul (it
saves memory, not time); or kernels that read the small codes directly, which an engine installs
through `kernel`, the one seam (engine/quantized.py: torch's weight-only CPU kernels). A layer
made with kernel=True while one is installed takes its layout; else the plain path.
"""
import contextlib

import torch
import torch.nn as nn
import torch.nn.functional as F

from qwen.lang import QwenError

MODES = ("int8", "int4")
GROUP = 128                                  # 4-bit: weights per scale, along the input dimension
KEEP_FP32 = ("in_proj_a", "in_proj_b")       # tiny, and they feed an exponent (the decay) and beta
ROWS_AT_ONCE = 1024                          # weight rows quantized (or dequantized) at a time: a few MB of temporaries


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
    """The 4-bit group along n_in inputs: `group`, or the largest power of two dividing both."""
    g = group
    while n_in % g:
        g //= 2
    return g


def quantize_int4(w, group=GROUP):
    """w (out, in) float -> codes (out, in) int8 in -7..7, scale (out, in / group) fp32: absmax
    per group (-8 unused, so that the range is the same both ways)."""
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
    return (q.float().reshape(out, scale.shape[1], -1) * scale[..., None]).reshape(out, n_in)


def pack_int4(q):
    """codes (out, in) in -8..7 -> (out, in / 2) uint8: two codes a byte, each stored as q + 8
    (0..15), the even column in the low 4 bits, the odd one in the high 4."""
    if q.shape[-1] % 2:
        raise QwenError("4-bit codes are packed two a byte: a weight with {n} inputs (an odd number) cannot be; use "
                        "int8 for it.", "4 位编码两个一字节打包：输入数为 {n}（奇数）的权重无法打包；请对它用 int8。", n=q.shape[-1])
    u = (q.to(torch.int16) + 8).to(torch.uint8)                           # 0..15
    return u[:, 0::2] | (u[:, 1::2] << 4)                                 # (out, in / 2)


def unpack_int4(packed):
    """(out, in / 2) uint8 -> codes (out, in) int8 in -8..7: pack_int4 undone."""
    low, high = (packed & 0xF).to(torch.int8) - 8, (packed >> 4).to(torch.int8) - 8
    return torch.stack((low, high), dim=-1).reshape(packed.shape[0], -1)  # columns back in order


def within_half_step(w, w_hat, step):
    """True when every |w - w_hat| is at most half its step (step: (out,) or (out, groups)), up to
    fp32's rounding of w / step and q * step (eps / 2 each): a slack of eps * (|w| + |w_hat|)."""
    w, w_hat = w.float(), w_hat.float()
    half = step.float()[:, None] / 2 if step.dim() == 1 else (step.float() / 2).repeat_interleave(
        w.shape[1] // step.shape[1], dim=1)                              # (out, in): each weight's half step
    slack = torch.finfo(torch.float32).eps * (w.abs() + w_hat.abs())
    return bool(((w - w_hat).abs() <= half + slack).all())


def error(w, w_hat):
    """{'max': largest |w - w_hat|, 'rms': root mean square of w - w_hat, 'rel': rms / rms(w)}."""
    d = (w.float() - w_hat.float())
    rms = float(d.pow(2).mean().sqrt())
    return {"max": float(d.abs().max()), "rms": rms, "rel": rms / max(float(w.float().pow(2).mean().sqrt()), 1e-30)}


class Kernels:
    """What an engine installs to compute quantized layers faster; this one declines everything.
    layout(kind "int8" / "int4", q, scale) -> {buffer name: tensor} its product computes from (int4:
    in place of the packed codes), or None: plain. product(layer, x (..., in)) -> (..., out), or None."""

    def layout(self, kind, q, scale):
        return None

    def product(self, layer, x):
        return None


_kernels = [Kernels()]                         # installed, innermost last


@contextlib.contextmanager
def kernel(fast):
    """While active, quantized layers made with kernel=True take fast's layout and product."""
    _kernels.append(fast)
    try:
        yield fast
    finally:
        _kernels.remove(fast)


def _by_rows(quantize, w, *args, name=None):
    """quantize(w, *args) ROWS_AT_ONCE rows at a time: the same result (rows are quantized on their
    own), without fp32 temporaries of a whole weight. w: a tensor, or rows still in a file. A NaN
    or an infinity is one line naming the weight (its file) and the row: its scale would mean nothing."""
    q = scale = None
    for i in range(0, w.shape[0], ROWS_AT_ONCE):                            # written in place: no small
        rows = w[i:i + ROWS_AT_ONCE]                                        # results kept between freed temporaries
        q_rows, s_rows = quantize(rows, *args)
        bad = (~torch.isfinite(s_rows.reshape(len(s_rows), -1)).all(dim=1)).nonzero()   # (bad rows, 1)
        if len(bad):
            file, row = getattr(getattr(w, "info", None), "file", None), int(bad[0, 0])
            en, zh = (f"{file}: {name}", f"{file}：{name}") if file else (name or "this weight", name or "这个权重")
            raise QwenError("{who_en}: row {row} holds {v}: only finite numbers can be quantized. Download the "
                            "checkpoint again, or find where that value came from.", "{who_zh}：第 {row} 行含有 {v}："
                            "只有有限的数才能量化。请重新下载检查点，或者查明这个值从哪里来。", who_en=en, who_zh=zh,
                            row=row + i, v=rows[row][~torch.isfinite(rows[row])][0].item())
        if q is None:
            q = torch.empty(w.shape, dtype=q_rows.dtype)
            scale = torch.empty((w.shape[0], *s_rows.shape[1:]), dtype=s_rows.dtype)
        q[i:i + ROWS_AT_ONCE], scale[i:i + ROWS_AT_ONCE] = q_rows, s_rows
    return q, scale


class _Quantized(nn.Module):
    """What Int8Linear and Int4Linear share: the kernel's layout, chosen once, and the forward."""
    in_features = property(lambda self: self.shape[1])                      # as nn.Linear has them
    out_features = property(lambda self: self.shape[0])
    nbytes = property(lambda self: sum(b.nbytes for b in self.buffers()))   # codes, scales, the kernel's

    def _take(self, kind, q, scale, kernel):
        self.fast = _kernels[-1] if kernel else _kernels[0]
        layout = self.fast.layout(kind, q, scale)
        self.kernel = layout is not None
        for name, t in (layout or {}).items():
            self.register_buffer(name, t)
        return self.kernel

    def forward(self, x):
        y = self.fast.product(self, x) if self.kernel else None
        return self.plain(x) if y is None else y


class Int8Linear(_Quantized):
    """y = x @ (q * scale).T with q int8 (out, in) and one fp32 scale per output row."""

    def __init__(self, q, scale, kernel=True):
        super().__init__()
        self.shape = tuple(q.shape)
        self.register_buffer("q", q.contiguous())                           # (out, in) int8
        self.register_buffer("scale", scale.float().contiguous())            # (out,)
        self._take("int8", self.q, self.scale, kernel)

    @classmethod
    def from_weight(cls, w, kernel=True, name=None):
        return cls(*_by_rows(quantize_int8, w, name=name), kernel=kernel)

    def dequantized(self):
        return dequantize_int8(self.q, self.scale)                           # (out, in) fp32

    def plain(self, x):
        """Dequantize, then an fp32 matmul, ROWS_AT_ONCE rows at a time (the whole table: 1 GB in fp32)."""
        x32 = x.float()
        y = x32.new_empty((*x.shape[:-1], self.out_features))               # (..., out)
        for i in range(0, self.out_features, ROWS_AT_ONCE):
            y[..., i:i + ROWS_AT_ONCE] = F.linear(x32, dequantize_int8(self.q[i:i + ROWS_AT_ONCE],
                                                                       self.scale[i:i + ROWS_AT_ONCE]))
        return y.to(x.dtype)


class Int4Linear(_Quantized):
    """y = x @ dequantize_int4(q, scale).T, codes packed two a byte by hand (pack_int4), or only in
    the installed kernel's layout (a plain copy beside it would double the bytes)."""

    def __init__(self, q, scale, kernel=True):
        super().__init__()
        self.shape, self.group = tuple(q.shape), q.shape[1] // scale.shape[1]
        if not self._take("int4", q, scale, kernel):
            self.register_buffer("packed", pack_int4(q))                     # (out, in / 2) uint8
            self.register_buffer("scale", scale.float().contiguous())        # (out, groups)

    @classmethod
    def from_weight(cls, w, kernel=True, group=GROUP, name=None):
        return cls(*_by_rows(quantize_int4, w, group, name=name), kernel=kernel)

    def dequantized(self):
        if self.kernel:                                                      # the kernel's layout: ask it
            return self(torch.eye(self.shape[1], dtype=torch.bfloat16)).T.float()   # rows of I give columns
        return dequantize_int4(unpack_int4(self.packed), self.scale)        # (out, in) fp32

    def plain(self, x):
        return F.linear(x.float(), self.dequantized()).to(x.dtype)


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


def projections(model):
    """[(name, parent module, attribute, nn.Linear)] of every projection quantize_model replaces."""
    return [(f"layers.{name}.{attr}", module, attr, child) for name, module in model.layers.named_modules()
            for attr, child in module.named_children() if isinstance(child, nn.Linear) and attr not in KEEP_FP32]


@torch.no_grad()
def quantize_model(model, mode, kernel=True):
    """Quantize a loaded Qwen35 in place, one layer at a time, and return it: every projection to
    `mode`, the output layer (the tied table, or lm_head) to int8. The MTP head is dropped (it
    drafts with the full-precision output layer). The rest is made fp32, so a model loaded as
    stored (bf16) gives the same model as one in fp32. kernel=False: every layer on the plain path."""
    if mode not in MODES:
        raise QwenError("Quantize to int8 or int4, not {m}.", "请量化为 int8 或 int4，而不是 {m}。", m=mode)
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
    for p in model.parameters():                                           # the rest: fp32, copied (a tensor
        p.data = p.data.to(torch.float32, copy=True)                       # mapped from the file would keep
    model.mtp, model.quant = None, mode                                    # the whole file's mapping alive)
    return model

