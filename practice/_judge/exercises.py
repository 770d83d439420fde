"""The exercises: what each asks for, its hints, and the cases it is graded on.

Every case compares the learner's function with the library (qwen/) or with an independent
formula, on random inputs, on edge cases (bf16 and fp16, large and tiny magnitudes, all-zero
vectors, odd shapes, extra batch dimensions, non-contiguous tensors) and on the model's own
tensors: the real Qwen3.5-0.8B when it is on disk, else the built-in tiny checkpoint.
"""
import dataclasses
import json
import re
from pathlib import Path

from qwen.lang import T

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MANIFEST = ROOT / "bench" / "qwen3.5-0.8b-manifest.json"


@dataclasses.dataclass
class Exercise:
    id: str
    slug: str
    title: tuple                       # (en, zh)
    difficulty: str                    # easy / medium
    needs_torch: bool
    functions: tuple
    hints: list                        # [(en, zh)], shown one level at a time
    wrong: list                        # [(file in wrong/, text the report must contain)]
    cases: object = None               # ctx -> [Case]

    @property
    def filename(self):
        return f"{self.id}_{self.slug}.py"


@dataclasses.dataclass
class Case:
    function: str
    name: str
    args: tuple
    expected: object                   # a tensor or a plain value, or None when `check` decides
    tol: tuple = None
    check: object = None               # optional: fn(result) raising compare.Mismatch


class Context:
    """The model tensors that cases use, from the real checkpoint if present, else the tiny one."""

    def __init__(self, model_path):
        from qwen.tiny import is_tiny
        from qwen.weights import Config, load_weights
        self.path = Path(model_path)
        self.cfg = Config.load(self.path)
        self.W = load_weights(self.path)
        self.tiny = is_tiny(self.cfg)

    @property
    def label(self):
        return T("tiny", "小检查点") if self.tiny else "Qwen3.5"


def _gen(seed):
    import torch
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------------------ 201

def header_as_dicts(file):
    """{name: {dtype, shape, data_offsets}} and data_start, from the library's reader."""
    from qwen.weights import read_header
    infos, _ = read_header(file)
    with open(file, "rb") as f:
        start = 8 + int.from_bytes(f.read(8), "little")
    return {n: {"dtype": i.dtype, "shape": list(i.shape), "data_offsets": [i.offset - start, i.offset - start + i.nbytes]}
            for n, i in infos.items()}, start


def cases_201(ctx, scratch):
    import torch
    from safetensors.torch import save_file
    shard = ctx.W.info("norm.weight").file
    with_meta = scratch / "with_metadata.safetensors"
    save_file({"b": torch.zeros(3, 2), "a": torch.ones(5, dtype=torch.bfloat16)}, str(with_meta),
              metadata={"format": "pt", "note": "the header's own entry"})
    empty = scratch / "empty_tensor.safetensors"
    save_file({"nothing": torch.zeros(0, 4), "x": torch.arange(6, dtype=torch.int64)}, str(empty))
    return [Case("read_header", T("{m} checkpoint: {f}", "{m} 检查点：{f}", m=ctx.label, f=shard.name), (str(shard),), header_as_dicts(shard)),
            Case("read_header", T("a file with __metadata__ (leave it out)", "带 __metadata__ 的文件（要去掉它）"), (str(with_meta),), header_as_dicts(with_meta)),
            Case("read_header", T("a zero-size tensor", "大小为 0 的张量"), (str(empty),), header_as_dicts(empty))]


# ------------------------------------------------------------------------------------------ 202

def count_by_layer_type(header, layer_types):
    """The judge's own count: parameters of the language model by the kind of layer they sit in."""
    out = {"linear_attention": 0, "full_attention": 0, "outside_layers": 0}
    for name, entry in header.items():
        if name == "__metadata__" or not name.startswith(("model.language_model.", "lm_head.")):
            continue
        n = 1
        for d in entry["shape"]:
            n *= d
        m = re.match(r"model\.language_model\.layers\.(\d+)\.", name)
        out[layer_types[int(m.group(1))] if m else "outside_layers"] += n
    return out


def cases_202(ctx, scratch):
    header, _ = header_as_dicts(ctx.W.info("norm.weight").file)
    manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
    real = {n: {"dtype": t["dtype"], "shape": t["shape"], "data_offsets": [0, 0]} for n, t in manifest["tensors"].items()}
    types = manifest["config"]["text_config"]["layer_types"]
    shuffled = dict(sorted(real.items(), reverse=True))
    return [Case("count_parameters", T("{m} checkpoint header", "{m} 检查点的文件头", m=ctx.label), (header, list(ctx.cfg.layer_types)),
                 count_by_layer_type(header, list(ctx.cfg.layer_types))),
            Case("count_parameters", T("the real Qwen3.5-0.8B header (488 tensors, vision and mtp included)", "真实 Qwen3.5-0.8B 的文件头（488 个张量，含视觉塔和 mtp）"),
                 (real, types), count_by_layer_type(real, types)),
            Case("count_parameters", T("the same header in another order", "同一个文件头，换一种顺序"), (shuffled, types), count_by_layer_type(real, types))]


# ------------------------------------------------------------------------------------------ 203

def cases_203(ctx, scratch):
    import torch
    E_model = ctx.W["embed_tokens.weight"][:4096]                # a slice of the stored table (bf16)
    g = _gen(203)
    E_small = torch.randn(50, 8, generator=g).bfloat16()
    E_f32 = torch.randn(30, 6, generator=g)
    ids1 = torch.tensor([9, 0, 4095, 17, 17])
    ids2 = torch.randint(0, 50, (2, 3), generator=g)
    H = E_model.shape[1]
    h1 = torch.randn(H, generator=g)
    h2 = torch.randn(2, 3, H, generator=g).bfloat16()
    h3 = torch.randn(6, 4, generator=g).t()                      # (4, 6), not contiguous
    fp32_logits = (1e-4, 1e-4)                                   # matmul order may differ
    return [Case("embed", T("{m} table rows", "{m} 嵌入表的行", m=ctx.label), (ids1, E_model), E_model[ids1]),
            Case("embed", T("ids with batch dimensions (2, 3)", "带批次维度 (2, 3) 的编号"), (ids2, E_small), E_small[ids2]),
            Case("embed", T("an fp32 table", "fp32 的嵌入表"), (torch.tensor([29, 0]), E_f32), E_f32[[29, 0]]),
            Case("tied_logits", T("{m} table, one fp32 vector", "{m} 嵌入表，一个 fp32 向量", m=ctx.label), (h1, E_model), h1 @ E_model.float().T, fp32_logits),
            Case("tied_logits", T("bf16 h with batch dimensions (2, 3)", "带批次维度 (2, 3) 的 bf16 h"), (h2, E_model),
                 h2.float() @ E_model.float().T, fp32_logits),
            Case("tied_logits", T("non-contiguous h, fp32 table", "不连续的 h，fp32 嵌入表"), (h3, E_f32), h3 @ E_f32.T, fp32_logits)]


# ------------------------------------------------------------------------------------------ 204

def cases_204(ctx, scratch):
    import torch
    from qwen.norm import GatedRMSNorm, RMSNorm
    from qwen.weights import load
    W, H, DV, eps = ctx.W, ctx.cfg.hidden_size, ctx.cfg.linear_value_head_dim, ctx.cfg.rms_norm_eps
    g = _gen(204)

    def ref(x, prefix):
        return load(RMSNorm(H, eps), W, prefix)(x).detach()

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
    hx = torch.randn(4, DV, generator=g)
    gate = torch.randn(4, DV, generator=g) * 3
    hx_b, gate_b = (torch.randn(2, 3, DV, generator=g)).bfloat16(), (torch.randn(2, 3, DV, generator=g) * 2).bfloat16()
    L = ctx.label
    return [
        Case("rms_norm", T("{m} layers.0.input_layernorm, fp32 x of RMS 5", "{m} layers.0.input_layernorm，均方根为 5 的 fp32 x", m=L), (x, w0, eps), ref(x, "layers.0.input_layernorm.")),
        Case("rms_norm", T("{m} final norm (large 1 + w)", "{m} 最后的归一化（1 + w 很大）", m=L), (x, wf, eps), ref(x, "norm.")),
        Case("rms_norm", T("bf16 input: statistics in fp32, one rounding at the end", "bf16 输入：统计量用 fp32，最后只舍入一次"), (xb, w0, eps),
             ref(xb, "layers.0.input_layernorm.")),
        Case("rms_norm", T("fp16 input of 300s (x^2 overflows fp16)", "全是 300 的 fp16 输入（x^2 在 fp16 中溢出）"), (xh, w0, eps), ref(xh, "layers.0.input_layernorm.")),
        Case("rms_norm", T("tiny magnitudes (1e-4): eps inside the root", "很小的数值（1e-4）：eps 在根号里"), (tiny, w0, eps), ref(tiny, "layers.0.input_layernorm.")),
        Case("rms_norm", T("all-zero vectors (no NaN)", "全零向量（不能是 NaN）"), (zero, w0, eps), ref(zero, "layers.0.input_layernorm.")),
        Case("rms_norm", T("non-contiguous input", "不连续的输入"), (nc, w0, eps), ref(nc, "layers.0.input_layernorm.")),
        Case("rms_norm", T("odd width 7 with extra batch dimensions (2, 1, 3, 7)", "宽度为 7、带额外批次维度 (2, 1, 3, 7)"), (odd_x, odd_w, eps), odd_ref(odd_x).detach()),
        Case("gated_rms_norm", T("{m} layers.0.linear_attn.norm, fp32", "{m} layers.0.linear_attn.norm，fp32", m=L), (hx, gate, gw, eps), gated(hx, gate).detach()),
        Case("gated_rms_norm", T("gate = -6, 0, +6", "门 = -6、0、+6"), (hx[:3], torch.tensor([[-6.0], [0.0], [6.0]]).expand(3, DV), gw, eps),
             gated(hx[:3], torch.tensor([[-6.0], [0.0], [6.0]]).expand(3, DV)).detach()),
        Case("gated_rms_norm", T("bf16 input and gate with batch dimensions", "带批次维度的 bf16 输入和门"), (hx_b, gate_b, gw, eps),
             gated(hx_b, gate_b).detach()),
        Case("gated_rms_norm", T("all-zero x (no NaN)", "全零的 x（不能是 NaN）"), (torch.zeros(2, DV), gate[:2], gw, eps),
             gated(torch.zeros(2, DV), gate[:2]).detach()),
    ]


# ------------------------------------------------------------------------------------------ 205

def cases_205(ctx, scratch):
    import torch
    from qwen.norm import l2norm
    g = _gen(205)
    dk = ctx.cfg.linear_key_head_dim
    q = torch.randn(2, 5, 4, dk, generator=g)                    # (batch, tokens, heads, head dim)
    small = torch.randn(3, dk, generator=g) * 1e-4               # length ~1e-3: eps matters
    big = torch.randn(2, dk, generator=g) * 1e15
    xb = torch.randn(3, dk, generator=g).bfloat16()
    nc = torch.randn(dk, 6, generator=g).t()
    # k as the model makes it: the real in_proj_qkv rows applied to a hidden vector, one head's slice
    Wqkv = ctx.W[f"layers.{ctx.cfg.linear_attention_layers[0]}.linear_attn.in_proj_qkv.weight"]
    k_real = (torch.randn(4, ctx.cfg.hidden_size, generator=g) @ Wqkv.float().T)[:, :dk]
    return [Case("l2norm", T("q of shape (2, 5, 4, head_dim), fp32", "形状 (2, 5, 4, head_dim) 的 q，fp32"), (q,), l2norm(q)),
            Case("l2norm", T("{m}: keys from the first linear-attention layer's in_proj_qkv", "{m}：由第一个线性注意力层的 in_proj_qkv 算出的键", m=ctx.label), (k_real,), l2norm(k_real)),
            Case("l2norm", T("small vectors (length ~1e-3): eps added to the sum", "很短的向量（长度约 1e-3）：eps 加在平方和上"), (small,), l2norm(small)),
            Case("l2norm", T("all-zero vectors (no NaN)", "全零向量（不能是 NaN）"), (torch.zeros(2, dk),), l2norm(torch.zeros(2, dk))),
            Case("l2norm", T("large magnitudes (1e15)", "很大的数值（1e15）"), (big,), l2norm(big)),
            Case("l2norm", T("bf16 input (computed in the input's dtype, like the model)", "bf16 输入（按输入的类型计算，和模型一样）"), (xb,), l2norm(xb)),
            Case("l2norm", T("non-contiguous input", "不连续的输入"), (nc,), l2norm(nc)),
            Case("l2norm", T("eps = 1e-2 given explicitly", "显式给出 eps = 1e-2"), (small, 1e-2), l2norm(small, eps=1e-2))]


# ------------------------------------------------------------------------------------------ 206

def cases_206(ctx, scratch):
    import torch
    import torch.nn.functional as F
    g = _gen(206)
    H = ctx.cfg.hidden_size
    rows = ctx.W.rows("embed_tokens.weight", torch.randint(0, 200000, (8,), generator=g))   # real rows, bf16
    x = torch.randn(3, H, generator=g) * 2 + 1                   # mean 1: the two norms differ
    odd = torch.randn(2, 1, 7, generator=g)
    const = torch.full((2, H), 3.0)                              # variance 0
    nc = torch.randn(H, 4, generator=g).t()

    def ln(t, eps=1e-6):
        return F.layer_norm(t.float(), (t.shape[-1],), eps=eps).to(t.dtype)

    def moments(t):
        t = t.double()
        return (t.var(-1, unbiased=False) + t.mean(-1) ** 2).sqrt().float()

    return [Case("layer_norm", T("fp32 vectors with mean 1", "均值为 1 的 fp32 向量"), (x,), ln(x)),
            Case("layer_norm", T("{m} embedding rows, bf16", "{m} 嵌入表的行，bf16", m=ctx.label), (rows,), ln(rows)),
            Case("layer_norm", T("width 7: population variance (divide by n, not n - 1)", "宽度 7：总体方差（除以 n，不是 n - 1）"), (odd,), ln(odd)),
            Case("layer_norm", T("constant vectors (variance 0, no NaN)", "常数向量（方差为 0，不能是 NaN）"), (const,), ln(const)),
            Case("layer_norm", T("non-contiguous input", "不连续的输入"), (nc,), ln(nc)),
            Case("rms_from_moments", T("fp32 vectors with mean 1", "均值为 1 的 fp32 向量"), (x,), moments(x)),
            Case("rms_from_moments", T("{m} embedding rows, bf16 (answer in fp32)", "{m} 嵌入表的行，bf16（结果用 fp32）", m=ctx.label), (rows,), moments(rows)),
            Case("rms_from_moments", T("width 7 (population variance)", "宽度 7（总体方差）"), (odd,), moments(odd))]


# ------------------------------------------------------------------------------------------ registry

EXERCISES = [
    Exercise("201", "safetensors_header", ("Read a safetensors header by hand", "手工读取 safetensors 文件头"),
             "easy", False, ("read_header",),
             [("The first 8 bytes are one unsigned integer, little-endian: int.from_bytes(b, 'little').",
               "前 8 个字节是一个小端序的无符号整数：int.from_bytes(b, 'little')。"),
              ("The next n bytes are JSON text: json.loads(f.read(n)). The data starts right after them, at 8 + n.",
               "接下来的 n 个字节是 JSON 文本：json.loads(f.read(n))。数据紧跟其后，从 8 + n 开始。"),
              ("The JSON has one extra entry, '__metadata__', that is not a tensor: pop it.",
               "JSON 里多了一个不是张量的条目 '__metadata__'：把它去掉。")],
             [("201_keeps_metadata.py", "unexpected keys ['__metadata__']"),
              ("201_big_endian.py", "more memory than")], cases_201),
    Exercise("202", "count_parameters", ("Count the parameters per layer type from the header",
                                         "根据文件头按层类型统计参数量"),
             "easy", False, ("count_parameters",),
             [("A tensor's parameter count is the product of its shape.", "一个张量的参数量是它形状各维的乘积。"),
              ("The layer index is the number after 'layers.'; layer_types[index] says its kind.",
               "层号是 'layers.' 后面的数字；layer_types[层号] 给出它的类型。"),
              ("Only the language model counts: skip model.visual.* and mtp.*; the embedding and the final norm "
               "go to 'outside_layers'.",
               "只统计语言模型：跳过 model.visual.* 和 mtp.*；嵌入表和最后的归一化算在 'outside_layers'。")],
             [("202_counts_mtp.py", "outside_layers"), ("202_counts_tensors.py", "linear_attention")], cases_202),
    Exercise("203", "embedding_logits", ("Embedding lookup and tied logits", "嵌入查表与共享输出层的 logits"),
             "easy", True, ("embed", "tied_logits"),
             [("An embedding lookup is indexing: E[ids] picks one row per id, for any shape of ids.",
               "嵌入查表就是索引：E[ids] 为每个编号取一行，ids 可以是任意形状。"),
              ("Tied logits are dot products with every row: h @ E.T, shape (..., vocab).",
               "共享输出层的 logits 是与每一行的点积：h @ E.T，形状 (..., vocab)。"),
              ("Upcast both to fp32 before the product, and return fp32 scores.", "相乘之前把两者都转成 fp32，返回 fp32 的分数。")],
             [("203_bf16_logits.py", "dtype"), ("203_float_rows.py", "dtype")], cases_203),
    Exercise("204", "rmsnorm", ("Zero-centred RMSNorm and gated RMSNorm", "零中心的 RMSNorm 与带门的 RMSNorm"),
             "easy", True, ("rms_norm", "gated_rms_norm"),
             [("RMSNorm divides each vector by sqrt(mean(x^2) + eps) along the last dimension.",
               "RMSNorm 沿最后一维把每个向量除以 sqrt(mean(x^2) + eps)。"),
              ("The stored weight is w - 1: multiply by (1 + weight). The gated norm's weight is plain: multiply "
               "by weight, then by silu(gate).",
               "存储的权重是 w - 1：要乘 (1 + weight)。带门的归一化的权重是普通的：乘 weight，再乘 silu(gate)。"),
              ("Compute in fp32 (x.float(), weight.float(), gate.float()) and cast back with .to(x.dtype) once, at the end.",
               "在 fp32 中计算（x.float()、weight.float()、gate.float()），最后只用一次 .to(x.dtype) 转回去。")],
             [("204_no_one_plus.py", "values differ"), ("204_no_fp32.py", "rms_norm"),
              ("204_eps_outside.py", "tiny magnitudes"), ("204_sigmoid_gate.py", "gated_rms_norm"),
              ("204_no_cast_back.py", "dtype")], cases_204),
    Exercise("205", "l2norm", ("l2norm, and where eps goes", "L2 归一化，以及 eps 放在哪里"),
             "easy", True, ("l2norm",),
             [("Divide each vector by its length sqrt(sum(x^2)) along the last dimension.",
               "沿最后一维把每个向量除以它的长度 sqrt(sum(x^2))。"),
              ("eps goes inside the root, added to the sum: x * rsqrt(sum(x*x) + eps).",
               "eps 放在根号里、加在平方和上：x * rsqrt(sum(x*x) + eps)。"),
              ("Compute in the input's dtype, as the model does; the model gives it fp32 tensors.",
               "按输入的类型计算，和模型一样；模型传入的都是 fp32 张量。")],
             [("205_mean_not_sum.py", "values differ"), ("205_eps_outside.py", "small vectors"),
              ("205_normalize.py", "small vectors")], cases_205),
    Exercise("206", "layernorm_vs_rmsnorm", ("LayerNorm against RMSNorm", "LayerNorm 与 RMSNorm 对比"),
             "medium", True, ("layer_norm", "rms_from_moments"),
             [("LayerNorm: subtract the mean, divide by sqrt(variance + eps). No weight, no bias here.",
               "LayerNorm：减去均值，再除以 sqrt(方差 + eps)。这里没有权重和偏置。"),
              ("Use the population variance (divide by n): x.var(-1, unbiased=False), not the default.",
               "用总体方差（除以 n）：x.var(-1, unbiased=False)，不要用默认值。"),
              ("RMS^2 = variance + mean^2: compute both in fp32 and return sqrt of their sum.",
               "RMS^2 = 方差 + 均值^2：两者都在 fp32 中计算，返回它们和的平方根。")],
             [("206_unbiased_var.py", "layer_norm: fp32 vectors with mean 1: values differ"), ("206_no_centering.py", "layer_norm")], cases_206),
]

BY_ID = {e.id: e for e in EXERCISES}
