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
import math
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

    def image_tokens(self):
        """(image_token_id, spatial_merge_size) for images in the prompt.

        Read when an image is given, not at load time: a text-only export has none of them, and
        its text chapters must not fail for that. The id is a top-level key of the multimodal
        config.json, the merge size is vision_config's (2 x 2 patches become one token)."""
        if not isinstance(self.raw.get("vision_config"), dict):
            raise QwenError("{source} has no vision_config: this checkpoint has no vision tower (a text-only "
                            "export), so it cannot read images. Use the multimodal checkpoint (Qwen/Qwen3.5-0.8B).",
                            "{source} 里没有 vision_config：这个检查点没有视觉塔（纯文本导出），读不了图像。"
                            "请使用多模态检查点（Qwen/Qwen3.5-0.8B）。", source=self.source)
        image = _int(self.raw, "image_token_id", self.vocab_size - 1, self.source)
        return image, _int(self.raw["vision_config"], "spatial_merge_size", 64, self.source)


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


# --------------------------------------------------------------------------------------------
# The vision tower's numbers (chapter 10)
# --------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class VisionConfig:
    """The vision tower's numbers, from config.json's "vision_config" (the nested layout only:
    a text-only export has no tower). Qwen3.5-0.8B: 12 blocks of width 768, 12 heads, patches
    of 16 x 16 pixels x 2 frames, a learned 48 x 48 position table, 2 x 2 patches merged into
    one token of width out_hidden_size = the language model's hidden_size (1024)."""
    depth: int                         # blocks
    hidden_size: int                   # width of every patch's vector inside the tower
    intermediate_size: int             # the blocks' MLP width
    num_heads: int
    in_channels: int                   # 3: RGB
    patch_size: int                    # pixels per patch side
    temporal_patch_size: int           # frames per patch (an image is repeated to fill them)
    spatial_merge_size: int            # m x m neighbouring patches become one token
    out_hidden_size: int               # the merged tokens' width: the language model's hidden_size
    num_position_embeddings: int       # rows of the learned position table, a square (48 x 48)
    rope_theta: float = 10000.0        # base of the 2D rotary frequencies
    source: str = dataclasses.field(default="", compare=False)

    RANGES = {"depth": 1024, "hidden_size": 65536, "intermediate_size": 1 << 20, "num_heads": 1024,
              "in_channels": 16, "patch_size": 1024, "temporal_patch_size": 64, "spatial_merge_size": 64,
              "out_hidden_size": 65536, "num_position_embeddings": 1 << 20}

    @property
    def head_dim(self):
        return self.hidden_size // self.num_heads

    @property
    def patch_values(self):
        """Numbers per patch: channels x frames x pixels x pixels (0.8B: 3 x 2 x 16 x 16 = 1536)."""
        return self.in_channels * self.temporal_patch_size * self.patch_size ** 2

    @property
    def grid_side(self):
        """Side of the square position table (0.8B: 48)."""
        return math.isqrt(self.num_position_embeddings)

    @classmethod
    def from_config(cls, cfg):
        """The VisionConfig of a Config (or a raw config.json dict), None when it has no tower."""
        raw = cfg.raw if isinstance(cfg, Config) else cfg
        source = cfg.source if isinstance(cfg, Config) else "config.json"
        if not isinstance(raw, dict) or "text_config" not in raw or raw.get("vision_config") is None:
            return None
        vision = raw["vision_config"]
        if not isinstance(vision, dict):
            raise _bad_field("vision_config", "a JSON object", vision, source)
        values = {name: _int(vision, name, top, source) for name, top in cls.RANGES.items()}
        values["rope_theta"] = _theta(vision, source)
        _check_vision(values, vision, source)
        return cls(**values, source=source)


def _theta(vision, source):
    params = vision.get("rope_parameters") or {}
    theta = params.get("rope_theta", 10000.0) if isinstance(params, dict) else None
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not 1 < theta < 1e12:
        raise _bad_field("vision_config.rope_parameters", "an object with rope_theta, a number above 1",
                         params, source)
    return float(theta)


def _check_vision(v, vision, source):
    """What the tower's shape rules need: heads split the width evenly into a multiple of 4 (the
    2D rotary gives a quarter of each head to each of rows and columns, times two for cos/sin
    pairs), a square position table, and the activations the course implements."""
    if v["hidden_size"] % v["num_heads"] or (v["hidden_size"] // v["num_heads"]) % 4:
        raise _bad_field("vision_config.hidden_size", f"a multiple of 4 x num_heads ({4 * v['num_heads']})",
                         v["hidden_size"], source)
    if math.isqrt(v["num_position_embeddings"]) ** 2 != v["num_position_embeddings"]:
        raise _bad_field("vision_config.num_position_embeddings", "a square number (48 x 48 = 2304)",
                         v["num_position_embeddings"], source)
    act = vision.get("hidden_act", "gelu_pytorch_tanh")
    if act != "gelu_pytorch_tanh":
        raise _bad_field("vision_config.hidden_act", "'gelu_pytorch_tanh'", act, source)


def vision_shapes(vcfg, out_hidden=None):
    """{full name: (shape, dtype)} of every `model.visual.*` tensor, from the vision config alone
    (the tests check them against the real checkpoint's 153). out_hidden: the merged tokens'
    width, which must be the language model's hidden_size (default: the config's out_hidden_size)."""
    D, I, m = vcfg.hidden_size, vcfg.intermediate_size, vcfg.spatial_merge_size
    out = vcfg.out_hidden_size if out_hidden is None else out_hidden
    kernel = (vcfg.temporal_patch_size, vcfg.patch_size, vcfg.patch_size)
    v = "model.visual."
    shapes = {v + "patch_embed.proj.weight": ((D, vcfg.in_channels, *kernel), "BF16"),   # a Conv3d's weight
              v + "patch_embed.proj.bias": ((D,), "BF16"),
              v + "pos_embed.weight": ((vcfg.num_position_embeddings, D), "BF16")}
    for i in range(vcfg.depth):
        b = f"{v}blocks.{i}."
        for norm in ("norm1", "norm2"):                                  # LayerNorms: weight and bias
            shapes[b + norm + ".weight"] = ((D,), "BF16")
            shapes[b + norm + ".bias"] = ((D,), "BF16")
        for name, (rows, cols) in (("attn.qkv", (3 * D, D)), ("attn.proj", (D, D)),
                                   ("mlp.linear_fc1", (I, D)), ("mlp.linear_fc2", (D, I))):
            shapes[b + name + ".weight"] = ((rows, cols), "BF16")
            shapes[b + name + ".bias"] = ((rows,), "BF16")
    merged = D * m * m                                                   # m x m patches side by side
    shapes[v + "merger.norm.weight"] = ((D,), "BF16")
    shapes[v + "merger.norm.bias"] = ((D,), "BF16")
    shapes[v + "merger.linear_fc1.weight"] = ((merged, merged), "BF16")
    shapes[v + "merger.linear_fc1.bias"] = ((merged,), "BF16")
    shapes[v + "merger.linear_fc2.weight"] = ((out, merged), "BF16")
    shapes[v + "merger.linear_fc2.bias"] = ((out,), "BF16")
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
