"""Exercises 201-206 (chapters 1-3): the checkpoint file, embeddings and logits, the norms.

Each case compares the learner's function with the library (qwen/) or an independent formula,
on random inputs, edge cases (bf16 and fp16, large and tiny magnitudes, all-zero vectors, odd
shapes, extra batch dimensions, non-contiguous tensors, a non-default eps) and the model's own
tensors: the real Qwen3.5-0.8B when it is on disk, else the built-in tiny checkpoint.
"""
import json
import re
from pathlib import Path

from practice._judge.exercises import Case, Diagnosis, Exercise, Tol

ROOT = Path(__file__).resolve().parents[3]
MANIFEST = ROOT / "bench" / "qwen3.5-0.8b-manifest.json"


def _raised(got, kind=None):
    from practice._judge.compare import Raised
    return isinstance(got, Raised) and (kind is None or got.kind == kind)


# ------------------------------------------------------------------------------------------ 201

def header_as_dicts(file):
    """{name: {dtype, shape, data_offsets}} and data_start, from the library's reader."""
    from qwen.weights import read_header
    infos, _ = read_header(file)
    with open(file, "rb") as f:
        start = 8 + int.from_bytes(f.read(8), "little")
    return ({n: {"dtype": i.dtype, "shape": list(i.shape), "data_offsets": [i.offset - start, i.offset - start + i.nbytes]}
             for n, i in infos.items()}, start)


def cases_201(ctx):
    import torch
    from safetensors.torch import save_file
    shard = ctx.W.info("norm.weight").file
    with_meta = ctx.scratch / "with_metadata.safetensors"
    save_file({"b": torch.zeros(3, 2), "a": torch.ones(5, dtype=torch.bfloat16)}, str(with_meta),
              metadata={"format": "pt", "note": "the header's own entry"})
    empty = ctx.scratch / "empty_tensor.safetensors"
    save_file({"nothing": torch.zeros(0, 4), "x": torch.arange(6, dtype=torch.int64)}, str(empty))
    about = ("the 8-byte length, the JSON header and where the data starts", "8 字节的长度、JSON 文件头，以及数据从哪里开始")
    return [Case("read_header", (f"{ctx.label} checkpoint: {shard.name}", f"{ctx.checkpoint_zh}：{shard.name}"),
                 (str(shard),), header_as_dicts(shard), about=about),
            Case("read_header", ("a file with __metadata__ (leave it out)", "带 __metadata__ 的文件（要去掉它）"),
                 (str(with_meta),), header_as_dicts(with_meta),
                 about=("__metadata__ is an entry of the JSON that is not a tensor", "__metadata__ 是 JSON 里一个不是张量的条目")),
            Case("read_header", ("a zero-size tensor", "大小为 0 的张量"), (str(empty),), header_as_dicts(empty), about=about)]


def _big_endian(case, got):
    with open(case.args[0], "rb") as f:
        n = int.from_bytes(f.read(8), "big")
    return _raised(got) or (isinstance(got, (tuple, list)) and len(got) == 2 and got[1] == 8 + n)


DIAGNOSES_201 = [
    Diagnosis("keeps_metadata", "read_header",
              ("looks like __metadata__ is still in your header: it is not a tensor, pop it",
               "看起来你的文件头里还留着 __metadata__：它不是张量，把它去掉"),
              test=lambda case, got: isinstance(got, (tuple, list)) and len(got) == 2 and isinstance(got[0], dict)
              and "__metadata__" in got[0]),
    Diagnosis("big_endian", "read_header",
              ("looks like the 8-byte length was read big-endian: the number is then huge; use int.from_bytes(b, 'little')",
               "看起来 8 字节的长度按大端序读了：这样得到的数巨大；请用 int.from_bytes(b, 'little')"),
              test=_big_endian),
]


# ------------------------------------------------------------------------------------------ 202

def count_by_layer_type(header, layer_types, *, prefixes=("model.language_model.", "lm_head."), count=None):
    """The judge's own count: parameters of the language model by the kind of layer they sit in."""
    out = {"linear_attention": 0, "full_attention": 0, "outside_layers": 0}
    for name, entry in header.items():
        if name == "__metadata__" or not name.startswith(prefixes):
            continue
        n = 1
        for d in entry["shape"]:
            n *= d
        m = re.match(r"model\.language_model\.layers\.(\d+)\.", name)
        out[layer_types[int(m.group(1))] if m else "outside_layers"] += n if count is None else count
    return out


def cases_202(ctx):
    header, _ = header_as_dicts(ctx.W.info("norm.weight").file)
    manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
    real = {n: {"dtype": t["dtype"], "shape": t["shape"], "data_offsets": [0, 0]} for n, t in manifest["tensors"].items()}
    types = manifest["config"]["text_config"]["layer_types"]
    shuffled = dict(sorted(real.items(), reverse=True))
    about = ("which tensors belong to the language model and which layer each sits in",
             "哪些张量属于语言模型，以及每个张量在哪一层")
    return [Case("count_parameters", (f"{ctx.label} checkpoint header", f"{ctx.checkpoint_zh}的文件头"),
                 (header, list(ctx.cfg.layer_types)), count_by_layer_type(header, list(ctx.cfg.layer_types)), about=about),
            Case("count_parameters", ("the real Qwen3.5-0.8B header (488 tensors, vision and mtp included)",
                                      "真实 Qwen3.5-0.8B 的文件头（488 个张量，含视觉塔和 mtp）"),
                 (real, types), count_by_layer_type(real, types),
                 about=("only model.language_model.* and lm_head.* count: not model.visual.*, not mtp.*",
                        "只统计 model.language_model.* 和 lm_head.*：不算 model.visual.*，也不算 mtp.*")),
            Case("count_parameters", ("the same header in another order", "同一个文件头，换一种顺序"), (shuffled, types),
                 count_by_layer_type(real, types), about=about)]


DIAGNOSES_202 = [
    Diagnosis("counts_mtp", "count_parameters",
              ("looks like the mtp.* tensors were counted: the multi-token-prediction head is not part of the language model",
               "看起来把 mtp.* 张量也算进去了：多词元预测头不属于语言模型"),
              mistake=lambda h, t: count_by_layer_type(h, t, prefixes=("model.language_model.", "lm_head.", "mtp."))),
    Diagnosis("counts_tensors", "count_parameters",
              ("looks like you counted tensors, not parameters: add the product of each shape",
               "看起来你数的是张量个数，而不是参数量：要加上每个形状各维的乘积"),
              mistake=lambda h, t: count_by_layer_type(h, t, count=1)),
    Diagnosis("counts_visual", "count_parameters",
              ("looks like the vision tower's model.visual.* tensors were counted: only model.language_model.* and "
               "lm_head.* are the language model (name.startswith(('model.language_model.', 'lm_head.')))",
               "看起来把视觉塔的 model.visual.* 张量也算进去了：只有 model.language_model.* 和 lm_head.* 属于语言模型"
               "（name.startswith(('model.language_model.', 'lm_head.'))）"),
              mistake=lambda h, t: count_by_layer_type(h, t, prefixes=("model.language_model.", "lm_head.",
                                                                        "model.visual."))),
]


# ------------------------------------------------------------------------------------------ 203

def cases_203(ctx):
    import torch
    E_model = ctx.W["embed_tokens.weight"][:4096]                # a slice of the stored table (bf16)
    g = ctx.gen(203)
    E_small = torch.randn(50, 8, generator=g).bfloat16()
    E_f32 = torch.randn(30, 6, generator=g)
    ids1 = torch.tensor([9, 0, 4095, 17, 17])
    ids2 = torch.randint(0, 50, (2, 3), generator=g)
    H = E_model.shape[1]
    h1 = torch.randn(H, generator=g)
    h2 = torch.randn(2, 3, H, generator=g).bfloat16()
    h3 = torch.randn(6, 4, generator=g).t()                      # (4, 6), not contiguous
    fp32_logits = Tol(1e-4, 1e-4)                                # the order of the sums may differ
    rows = ("E[ids]: one row per id, in E's dtype", "E[ids]：每个编号一行，类型与 E 相同")
    scores = ("h @ E.T in fp32, for any leading shape of h", "在 fp32 中计算 h @ E.T，h 前面的维度可以是任意形状")
    L = ctx.label
    return [Case("embed", (f"{L} table rows", f"{ctx.label_of}嵌入表的行"), (ids1, E_model), E_model[ids1], about=rows),
            Case("embed", ("ids with batch dimensions (2, 3)", "带批次维度 (2, 3) 的编号"), (ids2, E_small), E_small[ids2], about=rows),
            Case("embed", ("an fp32 table", "fp32 的嵌入表"), (torch.tensor([29, 0]), E_f32), E_f32[[29, 0]], about=rows),
            Case("tied_logits", (f"{L} table, one fp32 vector", f"{ctx.label_of}嵌入表，一个 fp32 向量"), (h1, E_model),
                 (h1.double() @ E_model.double().T).float(), fp32_logits, about=scores),
            Case("tied_logits", ("bf16 h with batch dimensions (2, 3)", "带批次维度 (2, 3) 的 bf16 h"), (h2, E_model),
                 h2.float() @ E_model.float().T, fp32_logits, about=scores),
            Case("tied_logits", ("non-contiguous h, fp32 table", "不连续的 h，fp32 嵌入表"), (h3, E_f32), h3 @ E_f32.T,
                 fp32_logits, about=scores)]


DIAGNOSES_203 = [
    Diagnosis("float_rows", "embed",
              ("the rows are right but converted: return them in E's dtype (no .float())",
               "行是对的，但被转换了类型：请按 E 的类型返回（不要 .float()）"),
              test=lambda case, got: _same_values_other_dtype(case, got)),
    Diagnosis("bf16_logits", "tied_logits",
              ("looks like the product was computed in bf16: upcast h and E to fp32 first, and return fp32",
               "看起来乘积是在 bf16 中算的：先把 h 和 E 转成 fp32，并返回 fp32"),
              test=lambda case, got: _is_tensor(got) and str(got.dtype) == "torch.bfloat16"),
    Diagnosis("bf16_product", "tied_logits",
              ("looks like the product was computed in bf16 and then converted to fp32 ((h.bfloat16() @ E.T).float()): "
               "the dtype is right but the scores were rounded to bf16 first; upcast h and E before the product",
               "看起来乘积是在 bf16 中算的，之后才转成 fp32（(h.bfloat16() @ E.T).float()）：类型对了，但分数先被舍入到了 "
               "bf16；要在乘之前把 h 和 E 转成 fp32"),
              mistake=lambda h, E: (h.to(E.dtype) @ E.T).float(), tol=Tol(1e-6, 1e-6)),
]


def _is_tensor(x):
    import torch
    return isinstance(x, torch.Tensor)


def _same_values_other_dtype(case, got):
    return (_is_tensor(got) and got.dtype != case.expected.dtype and got.shape == case.expected.shape
            and bool((got.double() == case.expected.double()).all()))


# ------------------------------------------------------------------------------------------ 204

def rms(h, dim=-1):
    return h.pow(2).mean(dim, keepdim=True)


def cases_204(ctx):
    import torch
    from qwen.norm import GatedRMSNorm, RMSNorm
    from qwen.weights import load
    W, H, DV, eps = ctx.W, ctx.cfg.hidden_size, ctx.cfg.linear_value_head_dim, ctx.cfg.rms_norm_eps
    g = ctx.gen(204)

    def ref(x, prefix, e=eps):
        return load(RMSNorm(H, e), W, prefix)(x).detach()

    w0, wf = W["layers.0.input_layernorm.weight"], W["norm.weight"]
    x = torch.randn(2, 3, H, generator=g) * 5
    xb = (torch.randn(4, H, generator=g) * 3).bfloat16()
    xh = torch.full((2, H), 300.0, dtype=torch.float16)          # 300^2 overflows fp16
    tiny = torch.randn(3, H, generator=g) * 1e-4                 # eps is not negligible here
    zero = torch.zeros(2, H)
    nc = (torch.randn(H, 5, generator=g) * 2).t()                # (5, H), not contiguous
    odd_w = (torch.randn(7, generator=g) * 0.3).bfloat16()
    odd_x = torch.randn(2, 1, 3, 7, generator=g)
    odd_ref = RMSNorm(7, eps)
    odd_ref.weight.data = odd_w
    gw = W["layers.0.linear_attn.norm.weight"]
    gated = load(GatedRMSNorm(DV, eps), W, "layers.0.linear_attn.norm.")
    gated_eps = load(GatedRMSNorm(DV, 1e-3), W, "layers.0.linear_attn.norm.")
    hx = torch.randn(4, DV, generator=g)
    gate = torch.randn(4, DV, generator=g) * 3
    hx_b, gate_b = (torch.randn(2, 3, DV, generator=g)).bfloat16(), (torch.randn(2, 3, DV, generator=g) * 2).bfloat16()
    small_h = torch.randn(3, DV, generator=g) * 1e-3
    tiny_h = torch.randn(3, DV, generator=g) * 1e-4               # eps is not negligible here
    ramp = torch.tensor([[-6.0], [0.0], [6.0]]).expand(3, DV)    # a stride-0 (expanded) gate
    L = ctx.label
    norm = ("x / sqrt(mean(x^2) + eps) along the last dimension, times (1 + weight)",
            "沿最后一维 x / sqrt(mean(x^2) + eps)，再乘 (1 + weight)")
    bits = ("fp32 statistics, then one rounding to x's dtype at the end: the bits must match",
            "统计量用 fp32，最后只舍入一次到 x 的类型：逐位比较")
    gnorm = ("normalize x, multiply by weight (not 1 + weight), then by silu(gate)",
             "先归一化 x，乘 weight（不是 1 + weight），再乘 silu(gate)")
    # the model's own order (transformers rounds the normalized value to bf16 before the weight)
    # is at most 2 bf16 steps from ours: both pass
    gated_bf16 = Tol(ulps=2)
    return [
        Case("rms_norm", (f"{L} layers.0.input_layernorm, fp32 x of RMS 5", f"{L} layers.0.input_layernorm，均方根为 5 的 fp32 x"),
             (x, w0, eps), ref(x, "layers.0.input_layernorm."), about=norm),
        Case("rms_norm", (f"{L} final norm (large 1 + w)", f"{ctx.label_of}最后的归一化（1 + w 很大）"), (x, wf, eps), ref(x, "norm."),
             about=norm),
        Case("rms_norm", ("bf16 input: statistics in fp32, one rounding at the end", "bf16 输入：统计量用 fp32，最后只舍入一次"),
             (xb, w0, eps), ref(xb, "layers.0.input_layernorm."), about=bits),
        Case("rms_norm", ("fp16 input of 300s (x^2 overflows fp16)", "全是 300 的 fp16 输入（x^2 在 fp16 中溢出）"),
             (xh, w0, eps), ref(xh, "layers.0.input_layernorm."),
             about=("300^2 = 90000 is above fp16's largest number (65504): square in fp32",
                    "300^2 = 90000 超过了 fp16 的最大值（65504）：要在 fp32 中求平方")),
        Case("rms_norm", ("tiny magnitudes (1e-4): eps inside the root", "很小的数值（1e-4）：eps 在根号里"),
             (tiny, w0, eps), ref(tiny, "layers.0.input_layernorm."),
             about=("here mean(x^2) is about 1e-8, so where eps goes changes the answer: sqrt(mean(x^2) + eps)",
                    "这里 mean(x^2) 约为 1e-8，eps 放在哪里会改变结果：sqrt(mean(x^2) + eps)")),
        Case("rms_norm", ("eps = 1e-3 given explicitly (use the argument)", "显式给出 eps = 1e-3（要用这个参数）"),
             (tiny, w0, 1e-3), ref(tiny, "layers.0.input_layernorm.", 1e-3),
             about=("the eps argument must be used, not a constant", "必须使用 eps 参数，而不是一个常数")),
        Case("rms_norm", ("all-zero vectors (no NaN)", "全零向量（不能是 NaN）"), (zero, w0, eps),
             ref(zero, "layers.0.input_layernorm."), about=("eps keeps the root above 0", "eps 让根号里的值大于 0")),
        Case("rms_norm", ("non-contiguous input", "不连续的输入"), (nc, w0, eps), ref(nc, "layers.0.input_layernorm."),
             about=("a transposed view: index along the last dimension, do not assume a layout",
                    "这是转置后的视图：沿最后一维计算，不要假设内存布局")),
        Case("rms_norm", ("odd width 7 with extra batch dimensions (2, 1, 3, 7)", "宽度为 7、带额外批次维度 (2, 1, 3, 7)"),
             (odd_x, odd_w, eps), odd_ref(odd_x).detach(),
             about=("any number of leading dimensions: reduce over dim=-1 only", "前面可以有任意多个维度：只在 dim=-1 上归约")),
        Case("gated_rms_norm", (f"{L} layers.0.linear_attn.norm, fp32", f"{L} layers.0.linear_attn.norm，fp32"),
             (hx, gate, gw, eps), gated(hx, gate).detach(), about=gnorm),
        Case("gated_rms_norm", ("gate = -6, 0, +6", "门 = -6、0、+6"), (hx[:3], ramp, gw, eps), gated(hx[:3], ramp).detach(),
             about=("silu(0) = 0 zeroes a row; silu(-6) is small, silu(6) is about 6",
                    "silu(0) = 0 会把一行变成 0；silu(-6) 很小，silu(6) 约为 6")),
        Case("gated_rms_norm", ("tiny magnitudes (1e-4), the model's eps: eps inside the root",
                                "很小的数值（1e-4），模型的 eps：eps 在根号里"),
             (tiny_h, gate[:3], gw, eps), gated(tiny_h, gate[:3]).detach(),
             about=("here mean(x^2) is about 1e-8, so where eps goes changes the answer: sqrt(mean(x^2) + eps)",
                    "这里 mean(x^2) 约为 1e-8，eps 放在哪里会改变结果：sqrt(mean(x^2) + eps)")),
        Case("gated_rms_norm", ("eps = 1e-3 given explicitly (use the argument)", "显式给出 eps = 1e-3（要用这个参数）"),
             (small_h, gate[:3], gw, 1e-3), gated_eps(small_h, gate[:3]).detach(),
             about=("the eps argument must be used, not a constant", "必须使用 eps 参数，而不是一个常数")),
        Case("gated_rms_norm", ("bf16 input and gate with batch dimensions", "带批次维度的 bf16 输入和门"), (hx_b, gate_b, gw, eps),
             gated(hx_b, gate_b).detach(), gated_bf16,
             about=("fp32 inside, bf16 out; rounding the normalized value to bf16 before the weight (as transformers "
                    "does) is accepted too", "内部用 fp32，输出 bf16；像 transformers 那样在乘权重之前把归一化的值舍入到 bf16 也可以")),
        Case("gated_rms_norm", ("all-zero x (no NaN)", "全零的 x（不能是 NaN）"), (torch.zeros(2, DV), gate[:2], gw, eps),
             gated(torch.zeros(2, DV), gate[:2]).detach(), about=("eps keeps the root above 0", "eps 让根号里的值大于 0")),
    ]


def _zc(weight):                                                # (1 + w) as the model applies it
    return 1.0 + weight.float()


def _unbiased_ms(h):
    n = h.shape[-1]
    return h.pow(2).sum(-1, keepdim=True) / max(n - 1, 1)


def _wrong_dim_204(case, got):
    """The mean taken over another dimension, or over everything."""
    import torch
    from practice._judge.compare import close
    x, w, eps = case.args
    h = x.float()
    options = [h.pow(2).mean()] + [rms(h, d) for d in range(h.dim() - 1)]
    return any(close(((h * torch.rsqrt(m + eps)) * _zc(w)).to(x.dtype), got, case.tol) for m in options)


def _std_204(case, got):
    """Divided by the standard deviation (torch.std: centred, n - 1) instead of the RMS."""
    import torch
    from practice._judge.compare import close
    x, w, eps = case.args
    h = x.float()
    options = []
    for unbiased in (True, False):
        sd = h.std(-1, keepdim=True, unbiased=unbiased)
        options += [h / (sd + eps), h / torch.sqrt(sd * sd + eps)]
    return any(close((o * _zc(w)).to(x.dtype), got, case.tol) for o in options)


def _rms_mistake(fn):
    """A mistaken rms_norm written as fn(h, w, eps) -> fp32 result, cast to x's dtype."""
    return lambda x, w, eps: fn(x.float(), w, eps).to(x.dtype)


def _gated_mistake(fn):
    import torch.nn.functional as F
    return lambda x, gate, w, eps: fn(x.float(), F.silu(gate.float()), w, eps, gate).to(x.dtype)


def _no_fp32(x, w, eps):
    import torch
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1 + w).to(x.dtype)


DIAGNOSES_204 = [
    Diagnosis("no_one_plus", "rms_norm",
              ("looks like the `1 +` is missing: your output equals the expected one divided by (1 + w); the file stores w, the scale is 1 + w",
               "看起来少了 `1 +`：你的输出等于期望值除以 (1 + w)；文件存的是 w，缩放是 1 + w"),
              mistake=_rms_mistake(lambda h, w, eps: h * _torch().rsqrt(rms(h) + eps) * w.float())),
    Diagnosis("one_plus_bf16", "rms_norm",
              ("looks like 1 + w was computed in bf16 (rounded before the upcast): use 1 + weight.float()",
               "看起来 1 + w 是在 bf16 中算的（在转成 fp32 之前已经舍入）：请用 1 + weight.float()"),
              mistake=_rms_mistake(lambda h, w, eps: h * _torch().rsqrt(rms(h) + eps) * (1 + w).float())),
    Diagnosis("no_fp32", "rms_norm",
              ("looks like the statistics were computed in the input's dtype: square and average in fp32 (x.float())",
               "看起来统计量是按输入的类型算的：请在 fp32 中求平方和平均（x.float()）"),
              mistake=_no_fp32, tol=Tol(ulps=2)),
    Diagnosis("eps_outside", "rms_norm",
              ("looks like eps was added outside the root, sqrt(mean(x^2)) + eps: it goes inside, sqrt(mean(x^2) + eps)",
               "看起来 eps 加在了根号外面，sqrt(mean(x^2)) + eps：它应当在根号里，sqrt(mean(x^2) + eps)"),
              mistake=_rms_mistake(lambda h, w, eps: h / (rms(h).sqrt() + eps) * _zc(w))),
    Diagnosis("no_cast_back", "rms_norm",
              ("the values are right but returned in fp32: cast back with .to(x.dtype) at the end",
               "数值是对的，但返回的是 fp32：最后用 .to(x.dtype) 转回去"),
              test=lambda case, got: _is_tensor(got) and got.dtype != case.expected.dtype
              and _close_after_cast(case, got)),
    Diagnosis("wrong_dim", "rms_norm",
              ("looks like the mean was taken over the wrong dimension: average over the last one, mean(-1, keepdim=True)",
               "看起来平均是在错误的维度上算的：应当沿最后一维，mean(-1, keepdim=True)"),
              test=_wrong_dim_204),
    Diagnosis("centred", "rms_norm",
              ("looks like the mean was subtracted first (that is LayerNorm): RMSNorm does not centre x",
               "看起来先减去了均值（那是 LayerNorm）：RMSNorm 不做中心化"),
              mistake=_rms_mistake(lambda h, w, eps: (h - h.mean(-1, keepdim=True))
                                   * _torch().rsqrt(h.var(-1, keepdim=True, unbiased=False) + eps) * _zc(w))),
    Diagnosis("std", "rms_norm",
              ("looks like you divided by the standard deviation (torch.std centres x): the RMS is sqrt(mean(x^2))",
               "看起来你除以的是标准差（torch.std 会减去均值）：均方根是 sqrt(mean(x^2))"),
              test=_std_204),
    Diagnosis("unbiased", "rms_norm",
              ("looks like the sum of squares was divided by n - 1: the mean divides by n",
               "看起来平方和除以了 n - 1：平均应当除以 n"),
              mistake=_rms_mistake(lambda h, w, eps: h * _torch().rsqrt(_unbiased_ms(h) + eps) * _zc(w))),
    Diagnosis("sigmoid_gate", "gated_rms_norm",
              ("looks like the gate went through sigmoid: silu(g) = g * sigmoid(g)",
               "看起来门用的是 sigmoid：silu(g) = g * sigmoid(g)"),
              mistake=_gated_mistake(lambda h, s, w, eps, g: h * _torch().rsqrt(rms(h) + eps) * w.float()
                                     * _torch().sigmoid(g.float()))),
    Diagnosis("gate_before_norm", "gated_rms_norm",
              ("looks like the gate was applied before the norm: normalize x first, then multiply by weight and silu(gate)",
               "看起来门在归一化之前就乘上了：先归一化 x，再乘 weight 和 silu(gate)"),
              mistake=_gated_mistake(lambda h, s, w, eps, g: (h * s) * _torch().rsqrt(rms(h * s) + eps) * w.float())),
    Diagnosis("gated_eps_outside", "gated_rms_norm",
              ("looks like eps was added outside the root, sqrt(mean(x^2)) + eps: it goes inside, sqrt(mean(x^2) + eps), "
               "in the gated norm as in rms_norm",
               "看起来 eps 加在了根号外面，sqrt(mean(x^2)) + eps：它应当在根号里，sqrt(mean(x^2) + eps)，带门的归一化"
               "和 rms_norm 一样"),
              mistake=_gated_mistake(lambda h, s, w, eps, g: h / (rms(h).sqrt() + eps) * w.float() * s)),
    Diagnosis("gated_one_plus", "gated_rms_norm",
              ("looks like you used 1 + weight: the gated norm's weight is a plain scale (multiply by weight)",
               "看起来你用了 1 + weight：带门的归一化的权重是普通的缩放（直接乘 weight）"),
              mistake=_gated_mistake(lambda h, s, w, eps, g: h * _torch().rsqrt(rms(h) + eps) * _zc(w) * s)),
]


def _torch():
    import torch
    return torch


def _close_after_cast(case, got):
    from practice._judge.compare import close
    return got.shape == case.expected.shape and close(case.expected, got.to(case.expected.dtype), case.tol)


# ------------------------------------------------------------------------------------------ 205

def _l2_exact(x, eps=1e-6):
    """The exact answer: computed in fp64, rounded once to x's dtype."""
    h = x.double()
    return (h / (h * h).sum(-1, keepdim=True).add(eps).sqrt()).to(x.dtype)


def cases_205(ctx):
    import torch
    g = ctx.gen(205)
    dk = ctx.cfg.linear_key_head_dim
    q = torch.randn(2, 5, 4, dk, generator=g)                    # (batch, tokens, heads, head dim)
    small = torch.randn(3, dk, generator=g) * 1e-4               # length ~1e-3: eps matters
    big = torch.randn(2, dk, generator=g) * 1e15
    xb = torch.randn(3, dk, generator=g).bfloat16()
    nc = torch.randn(dk, 6, generator=g).t()
    # k as the model makes it: the real in_proj_qkv rows applied to a hidden vector, one head's slice
    Wqkv = ctx.W[f"layers.{ctx.cfg.linear_attention_layers[0]}.linear_attn.in_proj_qkv.weight"]
    k_real = (torch.randn(4, ctx.cfg.hidden_size, generator=g) @ Wqkv.float().T)[:, :dk]
    unit = ("x / sqrt(sum(x^2) + eps) along the last dimension", "沿最后一维 x / sqrt(sum(x^2) + eps)")
    eps_about = ("the vectors are so short that sum(x^2) is about eps: eps goes inside the root, on the sum",
                 "向量很短，sum(x^2) 与 eps 差不多大：eps 要加在平方和上、在根号里")
    return [Case("l2norm", ("q of shape (2, 5, 4, head_dim), fp32", "形状 (2, 5, 4, head_dim) 的 q，fp32"), (q,), _l2_exact(q),
                 about=unit),
            Case("l2norm", (f"{ctx.label}: keys from the first linear-attention layer's in_proj_qkv",
                            f"{ctx.label}：由第一个线性注意力层的 in_proj_qkv 算出的键"), (k_real,), _l2_exact(k_real), about=unit),
            Case("l2norm", ("small vectors (length ~1e-3): eps added to the sum", "很短的向量（长度约 1e-3）：eps 加在平方和上"),
                 (small,), _l2_exact(small), about=eps_about),
            Case("l2norm", ("all-zero vectors (no NaN)", "全零向量（不能是 NaN）"), (torch.zeros(2, dk),),
                 _l2_exact(torch.zeros(2, dk)), about=("eps keeps the root above 0", "eps 让根号里的值大于 0")),
            Case("l2norm", ("large magnitudes (1e15)", "很大的数值（1e15）"), (big,), _l2_exact(big),
                 about=("x^2 is 1e30, still inside fp32's range", "x^2 是 1e30，仍在 fp32 的范围内")),
            Case("l2norm", ("bf16 input, computed in bf16 (within 3 bf16 steps of the exact value)",
                            "bf16 输入，按 bf16 计算（与精确值相差不超过 3 个 bf16 最小间隔）"), (xb,), _l2_exact(xb), Tol(ulps=3),
                 about=("the result stays in the input's dtype; any order of bf16 operations is within 3 steps",
                        "结果保持输入的类型；bf16 运算无论什么顺序都在 3 个最小间隔以内")),
            Case("l2norm", ("non-contiguous input", "不连续的输入"), (nc,), _l2_exact(nc),
                 about=("a transposed view: reduce over dim=-1", "这是转置后的视图：沿 dim=-1 归约")),
            Case("l2norm", ("eps = 1e-2 given explicitly", "显式给出 eps = 1e-2"), (small, 1e-2), _l2_exact(small, 1e-2),
                 about=("the eps argument must be used, not a constant", "必须使用 eps 参数，而不是一个常数"))]


def _l2_mistake(fn):
    return lambda x, eps=1e-6: fn(x, eps)


DIAGNOSES_205 = [
    Diagnosis("mean_not_sum", "l2norm",
              ("looks like you divided by the RMS (mean of squares): the length uses the sum, sqrt(sum(x^2) + eps)",
               "看起来你除以的是均方根（平方的平均）：长度用的是平方和，sqrt(sum(x^2) + eps)"),
              mistake=_l2_mistake(lambda x, eps: x * _torch().rsqrt((x * x).mean(-1, keepdim=True) + eps)), tol=Tol(1e-5, 1e-4)),
    Diagnosis("eps_outside", "l2norm",
              ("looks like eps was added to the length, sqrt(sum(x^2)) + eps: it goes inside the root, on the sum",
               "看起来 eps 加在了长度上，sqrt(sum(x^2)) + eps：它应当在根号里、加在平方和上"),
              mistake=_l2_mistake(lambda x, eps: x / ((x * x).sum(-1, keepdim=True).sqrt() + eps)), tol=Tol(1e-5, 1e-4)),
    Diagnosis("normalize", "l2norm",
              ("looks like F.normalize: it divides by max(length, eps) instead of sqrt(sum(x^2) + eps)",
               "看起来用了 F.normalize：它除以 max(长度, eps)，而不是 sqrt(sum(x^2) + eps)"),
              mistake=_l2_mistake(lambda x, eps: x / (x * x).sum(-1, keepdim=True).sqrt().clamp_min(eps)), tol=Tol(1e-5, 1e-4)),
]


# ------------------------------------------------------------------------------------------ 206

def cases_206(ctx):
    import torch
    import torch.nn.functional as F
    g = ctx.gen(206)
    H = ctx.cfg.hidden_size
    rows = ctx.W.rows("embed_tokens.weight", torch.randint(0, ctx.cfg.vocab_size, (8,), generator=g))   # real rows, bf16
    x = torch.randn(3, H, generator=g) * 2 + 1                   # mean 1: the two norms differ
    odd = torch.randn(2, 1, 7, generator=g)
    const = torch.full((2, H), 3.0)                              # variance 0
    nc = torch.randn(H, 4, generator=g).t()

    def ln(t, eps=1e-6):
        return F.layer_norm(t.double(), (t.shape[-1],), eps=eps).to(t.dtype)

    def moments(t):
        t = t.double()
        return (t.var(-1, unbiased=False) + t.mean(-1) ** 2).sqrt().float()

    lnab = ("(x - mean) / sqrt(var + eps), population variance, fp32 inside", "(x - 均值) / sqrt(方差 + eps)，总体方差，内部用 fp32")
    mab = ("sqrt(var + mean^2) per vector, fp32, shape x.shape[:-1]", "每个向量 sqrt(方差 + 均值^2)，fp32，形状 x.shape[:-1]")
    pop = ("with 7 values, dividing by n - 1 instead of n changes the variance by 17%",
           "只有 7 个数时，除以 n - 1 而不是 n 会让方差差 17%")
    L = ctx.label
    return [Case("layer_norm", ("fp32 vectors with mean 1", "均值为 1 的 fp32 向量"), (x,), ln(x), about=lnab),
            Case("layer_norm", (f"{L} embedding rows, bf16", f"{ctx.label_of}嵌入表的行，bf16"), (rows,), ln(rows), about=lnab),
            Case("layer_norm", ("width 7: population variance (divide by n, not n - 1)", "宽度 7：总体方差（除以 n，不是 n - 1）"),
                 (odd,), ln(odd), about=pop),
            Case("layer_norm", ("constant vectors (variance 0, no NaN)", "常数向量（方差为 0，不能是 NaN）"), (const,), ln(const),
                 about=("x - mean is 0 and eps keeps the root above 0", "x - 均值为 0，eps 让根号里的值大于 0")),
            Case("layer_norm", ("non-contiguous input", "不连续的输入"), (nc,), ln(nc), about=lnab),
            Case("rms_from_moments", ("fp32 vectors with mean 1", "均值为 1 的 fp32 向量"), (x,), moments(x), about=mab),
            Case("rms_from_moments", (f"{L} embedding rows, bf16 (answer in fp32)", f"{ctx.label_of}嵌入表的行，bf16（结果用 fp32）"),
                 (rows,), moments(rows), about=mab),
            Case("rms_from_moments", ("width 7 (population variance)", "宽度 7（总体方差）"), (odd,), moments(odd), about=pop)]


def _ln_options(x, eps, unbiased):
    h = x.float()
    c = h - h.mean(-1, keepdim=True)
    return (c * _torch().rsqrt(h.var(-1, keepdim=True, unbiased=unbiased) + eps)).to(x.dtype)


def _no_centering_206(case, got):
    from practice._judge.compare import close
    x, eps = case.args[0], (case.args[1] if len(case.args) > 1 else 1e-6)
    h = x.float()
    options = [h * _torch().rsqrt(h.var(-1, keepdim=True, unbiased=False) + eps),    # divided by std, not centred
               h * _torch().rsqrt(rms(h) + eps)]                                   # RMSNorm
    return any(close(o.to(x.dtype), got, case.tol) for o in options)


DIAGNOSES_206 = [
    Diagnosis("no_centering", "layer_norm",
              ("looks like the mean was not subtracted: LayerNorm centres x first (x - mean); without it this is RMSNorm",
               "看起来没有减去均值：LayerNorm 先做中心化（x - 均值）；不减就是 RMSNorm 了"),
              test=_no_centering_206),
    Diagnosis("unbiased_var", "layer_norm",
              ("looks like the unbiased variance (divide by n - 1, torch.var's default): use x.var(-1, unbiased=False)",
               "看起来用了无偏方差（除以 n - 1，torch.var 的默认值）：请用 x.var(-1, unbiased=False)"),
              mistake=lambda x, eps=1e-6: _ln_options(x, eps, True)),
    Diagnosis("unbiased_moments", "rms_from_moments",
              ("looks like the unbiased variance (n - 1): RMS^2 = population variance + mean^2",
               "看起来用了无偏方差（n - 1）：RMS^2 = 总体方差 + 均值^2"),
              mistake=lambda x: (x.float().var(-1) + x.float().mean(-1) ** 2).sqrt(), tol=Tol(1e-5, 1e-5)),
]


# ------------------------------------------------------------------------------------------ registry

# The chapter that teaches each exercise (the list and the page show it).
TAUGHT_IN = {"201": 1, "202": 1, "203": 2, "204": 3, "205": 3, "206": 3}

EXERCISES = [
    Exercise("201", "safetensors_header", ("Read a safetensors header by hand", "手工读取 safetensors 文件头"),
             "easy", False, ("read_header",),
             [("The first 8 bytes are one unsigned integer, little-endian: int.from_bytes(b, 'little').",
               "前 8 个字节是一个小端序的无符号整数：int.from_bytes(b, 'little')。"),
              ("The next n bytes are JSON text: json.loads(f.read(n)). The data starts right after them, at 8 + n.",
               "接下来的 n 个字节是 JSON 文本：json.loads(f.read(n))。数据紧跟其后，从 8 + n 开始。"),
              ("The JSON has one extra entry, '__metadata__', that is not a tensor: pop it.",
               "JSON 里多了一个不是张量的条目 '__metadata__'：把它去掉。")],
             cases_201, DIAGNOSES_201,
             {"201_keeps_metadata.py": "keeps_metadata", "201_big_endian.py": "big_endian"}),
    Exercise("202", "count_parameters", ("Count the parameters per layer type from the header",
                                         "根据文件头按层类型统计参数量"),
             "easy", False, ("count_parameters",),
             [("A tensor's parameter count is the product of its shape.", "一个张量的参数量是它形状各维的乘积。"),
              ("The layer index is the number after 'layers.'; layer_types[index] says its kind.",
               "层号是 'layers.' 后面的数字；layer_types[层号] 给出它的类型。"),
              ("Only the language model counts: skip model.visual.* and mtp.*; the embedding and the final norm "
               "go to 'outside_layers'.",
               "只统计语言模型：跳过 model.visual.* 和 mtp.*；嵌入表和最后的归一化算在 'outside_layers'。")],
             cases_202, DIAGNOSES_202,
             {"202_counts_mtp.py": "counts_mtp", "202_counts_tensors.py": "counts_tensors",
              "202_counts_visual.py": "counts_visual"}),
    Exercise("203", "embedding_logits", ("Embedding lookup and tied logits", "嵌入查表与共享输出层的 logits"),
             "easy", True, ("embed", "tied_logits"),
             [("An embedding lookup is indexing: E[ids] picks one row per id, for any shape of ids.",
               "嵌入查表就是索引：E[ids] 为每个编号取一行，ids 可以是任意形状。"),
              ("Tied logits are dot products with every row: h @ E.T, shape (..., vocab).",
               "共享输出层的 logits 是与每一行的点积：h @ E.T，形状 (..., vocab)。"),
              ("Upcast both to fp32 before the product, and return fp32 scores.", "相乘之前把两者都转成 fp32，返回 fp32 的分数。")],
             cases_203, DIAGNOSES_203,
             {"203_bf16_logits.py": "bf16_logits", "203_float_rows.py": "float_rows",
              "203_bf16_product.py": "bf16_product"}),
    Exercise("204", "rmsnorm", ("Zero-centred RMSNorm and gated RMSNorm", "零中心的 RMSNorm 与带门的 RMSNorm"),
             "easy", True, ("rms_norm", "gated_rms_norm"),
             [("RMSNorm divides each vector by sqrt(mean(x^2) + eps) along the last dimension.",
               "RMSNorm 沿最后一维把每个向量除以 sqrt(mean(x^2) + eps)。"),
              ("The file stores w, the scale is 1 + w: multiply by (1 + weight). The gated norm's weight is plain: multiply "
               "by weight, then by silu(gate).",
               "文件存的是 w，缩放是 1 + w：要乘 (1 + weight)。带门的归一化的权重是普通的：乘 weight，再乘 silu(gate)。"),
              ("Compute in fp32 (x.float(), weight.float(), gate.float()) and cast back with .to(x.dtype) once, at the end.",
               "在 fp32 中计算（x.float()、weight.float()、gate.float()），最后只用一次 .to(x.dtype) 转回去。")],
             cases_204, DIAGNOSES_204,
             {"204_no_one_plus.py": "no_one_plus", "204_one_plus_bf16.py": "one_plus_bf16", "204_no_fp32.py": "no_fp32",
              "204_eps_outside.py": "eps_outside", "204_no_cast_back.py": "no_cast_back", "204_wrong_dim.py": "wrong_dim",
              "204_centred.py": "centred", "204_std.py": "std", "204_unbiased.py": "unbiased",
              "204_sigmoid_gate.py": "sigmoid_gate", "204_gate_before_norm.py": "gate_before_norm",
              "204_gated_one_plus.py": "gated_one_plus", "204_gated_eps_outside.py": "gated_eps_outside"}),
    Exercise("205", "l2norm", ("l2norm, and where eps goes", "L2 归一化，以及 eps 放在哪里"),
             "easy", True, ("l2norm",),
             [("Divide each vector by its length sqrt(sum(x^2)) along the last dimension.",
               "沿最后一维把每个向量除以它的长度 sqrt(sum(x^2))。"),
              ("eps goes inside the root, added to the sum: x / sqrt(sum(x*x) + eps) (or x * rsqrt(...)).",
               "eps 放在根号里、加在平方和上：x / sqrt(sum(x*x) + eps)（或 x * rsqrt(...)）。"),
              ("Compute in the input's dtype, as the model does; the model gives it fp32 tensors.",
               "按输入的类型计算，和模型一样；模型传入的都是 fp32 张量。")],
             cases_205, DIAGNOSES_205,
             {"205_mean_not_sum.py": "mean_not_sum", "205_eps_outside.py": "eps_outside", "205_normalize.py": "normalize"}),
    Exercise("206", "layernorm_vs_rmsnorm", ("LayerNorm against RMSNorm", "LayerNorm 与 RMSNorm 对比"),
             "medium", True, ("layer_norm", "rms_from_moments"),
             [("LayerNorm: subtract the mean, divide by sqrt(variance + eps). No weight, no bias here.",
               "LayerNorm：减去均值，再除以 sqrt(方差 + eps)。这里没有权重和偏置。"),
              ("Use the population variance (divide by n): x.var(-1, unbiased=False), not the default.",
               "用总体方差（除以 n）：x.var(-1, unbiased=False)，不要用默认值。"),
              ("RMS^2 = variance + mean^2: compute both in fp32 and return sqrt of their sum.",
               "RMS^2 = 方差 + 均值^2：两者都在 fp32 中计算，返回它们和的平方根。")],
             cases_206, DIAGNOSES_206,
             {"206_unbiased_var.py": ("unbiased_var", "unbiased_moments"), "206_no_centering.py": "no_centering"}),
]
