"""config.json: the numbers that fix every shape of the model.

Qwen3.5's config comes in two layouts: the multimodal checkpoint nests the language model's
numbers under "text_config", a text-only export has them at the top level. `Config` reads
either and keeps only what the course uses.

    cfg = Config.load(path)          # cfg.hidden_size, cfg.layer_types, ...
    language_model_shapes(cfg)       # {short name: (shape, dtype)} the weights must have

Every number is checked here, once: present, of the right type, in a sane range (so no typo
can make the course allocate terabytes), and consistent with the others. qwen/weights.py then
checks the config against the tensors' shapes before anything is allocated.
"""
import dataclasses
from pathlib import Path

from qwen.files import kind_of, missing_path, read_json
from qwen.lang import QwenError


@dataclasses.dataclass(frozen=True)
class Config:
    """The language model's numbers, from either config.json layout."""
    hidden_size: int
    num_hidden_layers: int
    layer_types: tuple
    intermediate_size: int
    num_attention_heads: int           # full attention: query heads
    num_key_value_heads: int           # full attention: key/value heads (shared by groups of queries)
    head_dim: int                      # full attention: not hidden_size / num_attention_heads here
    linear_num_key_heads: int          # linear attention (Gated DeltaNet)
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int
    rms_norm_eps: float
    vocab_size: int
    tie_word_embeddings: bool
    source: str = dataclasses.field(default="", compare=False)   # the file it came from, for messages
    raw: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    # Each integer's allowed range: wide enough for any Qwen3.5 size, narrow enough that a typo
    # (or a hostile file) cannot make the course allocate terabytes or loop 10**12 times.
    RANGES = {"hidden_size": 65536, "num_hidden_layers": 1024, "intermediate_size": 1 << 20,
              "num_attention_heads": 1024, "num_key_value_heads": 1024, "head_dim": 4096,
              "linear_num_key_heads": 1024, "linear_num_value_heads": 1024, "linear_key_head_dim": 4096,
              "linear_value_head_dim": 4096, "linear_conv_kernel_dim": 64, "vocab_size": 1 << 24}

    @classmethod
    def load(cls, path):
        """Read config.json from a model folder (or the file itself)."""
        path = Path(path).expanduser()
        kind = kind_of(path)
        if kind is None:
            raise missing_path(path)
        file = path / "config.json" if kind == "folder" else path
        if kind_of(file) != "file":
            raise QwenError(
                "{folder} has no config.json, so it is not a model folder. Pass the folder that "
                "holds config.json and the .safetensors files (--model PATH or QWEN_MODEL).",
                "{folder} 里没有 config.json，所以不是模型文件夹。请给出包含 config.json 和 "
                ".safetensors 文件的文件夹（--model PATH 或 QWEN_MODEL）。", folder=path)
        return cls.from_dict(read_json(file), source=str(file))

    @classmethod
    def from_dict(cls, raw, source="config.json"):
        if not isinstance(raw, dict):
            raise QwenError("{file} should hold a JSON object.", "{file} 应当是一个 JSON 对象。", file=source)
        # Multimodal checkpoints nest the language model under text_config; text-only exports don't.
        text = raw.get("text_config", raw)
        if not isinstance(text, dict):
            raise _bad_field("text_config", "a JSON object", text, source)
        values = {name: _int(text, name, top, source) for name, top in cls.RANGES.items()}
        values["rms_norm_eps"] = _eps(text, source)
        tie = text.get("tie_word_embeddings", raw.get("tie_word_embeddings", False))
        if not isinstance(tie, bool):
            raise _bad_field("tie_word_embeddings", "true or false", tie, source)
        values["tie_word_embeddings"] = tie
        values["layer_types"] = _layer_types(text, values["num_hidden_layers"], source)
        _check_groups(values, source)
        return cls(**values, source=source, raw=raw)

    @property
    def full_attention_layers(self):
        return [i for i, t in enumerate(self.layer_types) if t == "full_attention"]

    @property
    def linear_attention_layers(self):
        return [i for i, t in enumerate(self.layer_types) if t == "linear_attention"]


def _field(d, name, source):
    if name not in d:
        raise QwenError("{source}: the field {name!r} is missing. The file is incomplete or not a "
                        "Qwen3.5 config; download it again.",
                        "{source}：缺少字段 {name!r}。文件不完整或不是 Qwen3.5 的配置，请重新下载。",
                        source=source, name=name)
    return d[name]


def _int(d, name, top, source):
    value = _field(d, name, source)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
        raise _bad_field(name, f"an integer from 1 to {top:,}", value, source)
    return value


def _eps(d, source):
    """rms_norm_eps: added to a mean of squares before the square root, so a small positive number."""
    value = _field(d, "rms_norm_eps", source)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise _bad_field("rms_norm_eps", "a number between 0 and 1 (Qwen3.5: 1e-06)", value, source)
    return float(value)                                      # NaN, inf and 1e999 (inf) fail 0 < v < 1


def _check_groups(v, source):
    """Query heads share key/value heads in equal groups, in both kinds of attention."""
    for many, few in (("num_attention_heads", "num_key_value_heads"),
                      ("linear_num_value_heads", "linear_num_key_heads")):
        if v[many] % v[few]:
            raise _bad_field(many, f"a multiple of {few} ({v[few]})", v[many], source)


def _bad_field(name, wanted, value, source):
    shown = repr(value)
    shown = shown if len(shown) <= 80 else shown[:60] + f"... ({len(shown):,} characters)"
    return QwenError("{source}: the field {name!r} should be {wanted}, but it is {value}.",
                     "{source}：字段 {name!r} 应当是 {wanted}，实际是 {value}。",
                     source=source, name=name, wanted=wanted, value=shown)


def _layer_types(text, n_layers, source):
    types = text.get("layer_types")
    if types is None:                   # older exports: every interval-th layer is full attention
        interval = _int(text, "full_attention_interval", n_layers, source)
        return tuple("full_attention" if (i + 1) % interval == 0 else "linear_attention"
                     for i in range(n_layers))
    allowed = ("full_attention", "linear_attention")
    if not isinstance(types, list) or len(types) != n_layers or not all(t in allowed for t in types):
        raise _bad_field("layer_types", f"a list of {n_layers} entries, each one of "
                         "'linear_attention' / 'full_attention'", types, source)
    return tuple(types)


def language_model_shapes(cfg):
    """{short name: (shape, dtype)} of every language-model tensor, from the config alone: the
    architecture's shape rules in one place (the tests check them against the real checkpoint)."""
    H, I, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    nk, nv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    dk, dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
    nh, nkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    conv = 2 * nk * dk + nv * dv                      # q, k and v go through one causal conv
    shapes = {"embed_tokens.weight": ((V, H), "BF16")}
    for i, kind in enumerate(cfg.layer_types):
        p = f"layers.{i}."
        shapes[p + "input_layernorm.weight"] = ((H,), "BF16")
        shapes[p + "post_attention_layernorm.weight"] = ((H,), "BF16")
        shapes[p + "mlp.gate_proj.weight"] = ((I, H), "BF16")
        shapes[p + "mlp.up_proj.weight"] = ((I, H), "BF16")
        shapes[p + "mlp.down_proj.weight"] = ((H, I), "BF16")
        if kind == "linear_attention":
            a = p + "linear_attn."
            shapes[a + "in_proj_qkv.weight"] = ((conv, H), "BF16")
            shapes[a + "in_proj_z.weight"] = ((nv * dv, H), "BF16")
            shapes[a + "in_proj_b.weight"] = ((nv, H), "BF16")
            shapes[a + "in_proj_a.weight"] = ((nv, H), "BF16")
            shapes[a + "conv1d.weight"] = ((conv, 1, cfg.linear_conv_kernel_dim), "BF16")
            shapes[a + "dt_bias"] = ((nv,), "BF16")
            shapes[a + "A_log"] = ((nv,), "F32")       # the two fp32 tensors of the checkpoint
            shapes[a + "norm.weight"] = ((dv,), "F32")
            shapes[a + "out_proj.weight"] = ((H, nv * dv), "BF16")
        else:
            a = p + "self_attn."
            shapes[a + "q_proj.weight"] = ((nh * hd * 2, H), "BF16")   # per head: query, then output gate
            shapes[a + "k_proj.weight"] = ((nkv * hd, H), "BF16")
            shapes[a + "v_proj.weight"] = ((nkv * hd, H), "BF16")
            shapes[a + "o_proj.weight"] = ((H, nh * hd), "BF16")
            shapes[a + "q_norm.weight"] = ((hd,), "BF16")
            shapes[a + "k_norm.weight"] = ((hd,), "BF16")
    shapes["norm.weight"] = ((H,), "BF16")
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = ((V, H), "BF16")
    return shapes


def mtp_layers(cfg):
    """How many decoder layers the multi-token-prediction head has (text_config's
    mtp_num_hidden_layers; 1 in Qwen3.5-0.8B)."""
    raw = cfg.raw if isinstance(cfg, Config) else {}
    text = raw.get("text_config", raw)
    n = text.get("mtp_num_hidden_layers", 1)
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else 1


def mtp_shapes(cfg):
    """{full name: (shape, dtype)} of the multi-token-prediction head's tensors (`mtp.*`, 15 in 0.8B),
    from the config alone. The head is one more decoder layer, always full attention, whose input is
    fc(cat[norm(embedding), norm(hidden)]): fc maps 2 x hidden to hidden. The layer's shapes are the
    main model's full-attention shapes (q_proj with its output-gate rows included)."""
    H, I = cfg.hidden_size, cfg.intermediate_size
    nh, nkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    shapes = {"mtp.fc.weight": ((H, 2 * H), "BF16"),                     # (hidden, [embedding; hidden])
              "mtp.pre_fc_norm_embedding.weight": ((H,), "BF16"),
              "mtp.pre_fc_norm_hidden.weight": ((H,), "BF16")}
    for i in range(mtp_layers(cfg)):
        p = f"mtp.layers.{i}."
        shapes[p + "input_layernorm.weight"] = ((H,), "BF16")
        shapes[p + "post_attention_layernorm.weight"] = ((H,), "BF16")
        shapes[p + "mlp.gate_proj.weight"] = ((I, H), "BF16")
        shapes[p + "mlp.up_proj.weight"] = ((I, H), "BF16")
        shapes[p + "mlp.down_proj.weight"] = ((H, I), "BF16")
        shapes[p + "self_attn.q_proj.weight"] = ((nh * hd * 2, H), "BF16")
        shapes[p + "self_attn.k_proj.weight"] = ((nkv * hd, H), "BF16")
        shapes[p + "self_attn.v_proj.weight"] = ((nkv * hd, H), "BF16")
        shapes[p + "self_attn.o_proj.weight"] = ((H, nh * hd), "BF16")
        shapes[p + "self_attn.q_norm.weight"] = ((hd,), "BF16")
        shapes[p + "self_attn.k_norm.weight"] = ((hd,), "BF16")
    shapes["mtp.norm.weight"] = ((H,), "BF16")
    return shapes
