"""config.json: the numbers that fix every shape of the model.

The multimodal checkpoint nests the language model's numbers under "text_config", a text-only export
has them at the top level. `Config` reads either, keeping what the course uses; `VisionConfig` reads
the tower's (chapter 10). Every number is checked here, once: present, of the right type, in a sane
range, and consistent with the others.
    cfg = Config.load(path)          # cfg.hidden_size, cfg.layer_types, ...
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

    # Each integer's upper bound: wide enough for any Qwen3.5 size, small enough that no typo allocates terabytes.
    RANGES = {"hidden_size": 65536, "num_hidden_layers": 1024, "intermediate_size": 1 << 20,
              "num_attention_heads": 1024, "num_key_value_heads": 1024, "head_dim": 4096,
              "linear_num_key_heads": 1024, "linear_num_value_heads": 1024, "linear_key_head_dim": 4096,
              "linear_value_head_dim": 4096, "linear_conv_kernel_dim": 64, "vocab_size": 1 << 24}

    @classmethod
    def load(cls, path):
        """Read config.json from a model folder (or the file itself)."""
        path = Path(path).expanduser()
        if (kind := kind_of(path)) is None:
            raise missing_path(path)
        file = path / "config.json" if kind == "folder" else path
        if kind_of(file) != "file":
            raise QwenError("{folder} has no config.json, so it is not a model folder. Pass the folder that holds "
                            "config.json and the .safetensors files (--model PATH or QWEN_MODEL).", "{folder} 里没有 "
                            "config.json，所以不是模型文件夹。请给出包含 config.json 和 .safetensors 文件的文件夹"
                            "（--model PATH 或 QWEN_MODEL）。", folder=path)
        return cls.from_dict(read_json(file), source=str(file))

    @classmethod
    def from_dict(cls, raw, source="config.json"):
        if not isinstance(raw, dict):
            raise QwenError("{file} should hold a JSON object.", "{file} 应当是一个 JSON 对象。", file=source)
        if not isinstance(text := raw.get("text_config", raw), dict):        # multimodal: nested; text-only: flat
            raise _bad_field("text_config", "a JSON object", text, source)
        values = {name: _int(text, name, top, source) for name, top in cls.RANGES.items()}
        values["rms_norm_eps"] = _eps(text, source)
        values["tie_word_embeddings"] = tie = text.get("tie_word_embeddings", raw.get("tie_word_embeddings", False))
        if not isinstance(tie, bool):
            raise _bad_field("tie_word_embeddings", "true or false", tie, source)
        values["layer_types"] = _layer_types(text, values["num_hidden_layers"], source)
        _check_groups(values, source)
        return cls(**values, source=source, raw=raw)

    full_attention_layers = property(lambda self: [i for i, t in enumerate(self.layer_types) if t == "full_attention"])
    linear_attention_layers = property(lambda self: [i for i, t in enumerate(self.layer_types) if t == "linear_attention"])

    def image_tokens(self):
        """(image_token_id, spatial_merge_size) for images in the prompt, read only when an image is given: a
        text-only export has neither (the id is a top-level key, the merge size vision_config's)."""
        if not isinstance(self.raw.get("vision_config"), dict):
            raise QwenError("{source} has no vision_config: this checkpoint has no vision tower (a text-only export), so "
                            "it cannot read images. Use the multimodal checkpoint (Qwen/Qwen3.5-0.8B).", "{source} 里没有 "
                            "vision_config：这个检查点没有视觉塔（纯文本导出），读不了图像。请使用多模态检查点（Qwen/Qwen3.5-0.8B）。",
                            source=self.source)
        image = _int(self.raw, "image_token_id", self.vocab_size - 1, self.source)
        return image, _int(self.raw["vision_config"], "spatial_merge_size", 64, self.source)


def _field(d, name, source):
    if name not in d:
        raise QwenError("{source}: the field {name!r} is missing. The file is incomplete or not a Qwen3.5 config; "
                        "download it again.", "{source}：缺少字段 {name!r}。文件不完整或不是 Qwen3.5 的配置，请重新下载。",
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
    for many, few in (("num_attention_heads", "num_key_value_heads"), ("linear_num_value_heads", "linear_num_key_heads")):
        if v[many] % v[few]:
            raise _bad_field(many, f"a multiple of {few} ({v[few]})", v[many], source)


def _bad_field(name, wanted, value, source):
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:60] + f"... ({len(repr(value)):,} characters)"
    return QwenError("{source}: the field {name!r} should be {wanted}, but it is {value}.", "{source}：字段 {name!r} 应当是 "
                     "{wanted}，实际是 {value}。", source=source, name=name, wanted=wanted, value=shown)


def _layer_types(text, n_layers, source):
    if (types := text.get("layer_types")) is None:      # without the list: every interval-th layer is full attention
        interval = _int(text, "full_attention_interval", n_layers, source)
        return tuple("full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n_layers))
    allowed = ("full_attention", "linear_attention")
    if not isinstance(types, list) or len(types) != n_layers or not all(t in allowed for t in types):
        raise _bad_field("layer_types", f"a list of {n_layers} entries, each one of 'linear_attention' / 'full_attention'",
                         types, source)
    return tuple(types)


# ---------------------------------------------------------------------------- the vision tower (chapter 10)
@dataclasses.dataclass(frozen=True)
class VisionConfig:
    """The vision tower's numbers, from config.json's "vision_config" (nested layout only). Qwen3.5-0.8B: 12 blocks
    of width 768, 12 heads, patches of 16 x 16 pixels x 2 frames, 2 x 2 patches merged into one token."""
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

    head_dim = property(lambda self: self.hidden_size // self.num_heads)
    patch_values = property(lambda self: self.in_channels * self.temporal_patch_size * self.patch_size ** 2,
                            doc="Numbers per patch: channels x frames x pixels x pixels (0.8B: 3 x 2 x 16 x 16 = 1536).")
    grid_side = property(lambda self: math.isqrt(self.num_position_embeddings), doc="Side of the position table (0.8B: 48).")

    @classmethod
    def from_config(cls, cfg):
        """The VisionConfig of a Config (or a raw config.json dict), None when it has no tower."""
        raw = cfg.raw if isinstance(cfg, Config) else cfg
        source = cfg.source if isinstance(cfg, Config) else "config.json"
        if not isinstance(raw, dict) or "text_config" not in raw or raw.get("vision_config") is None:
            return None
        if not isinstance(vision := raw["vision_config"], dict):
            raise _bad_field("vision_config", "a JSON object", vision, source)
        values = {name: _int(vision, name, top, source) for name, top in cls.RANGES.items()}
        values["rope_theta"] = _theta(vision, source)
        _check_vision(values, vision, source)
        return cls(**values, source=source)


def _theta(vision, source):
    params = vision.get("rope_parameters") or {}
    theta = params.get("rope_theta", 10000.0) if isinstance(params, dict) else None
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not 1 < theta < 1e12:
        raise _bad_field("vision_config.rope_parameters", "an object with rope_theta, a number above 1", params, source)
    return float(theta)


def _check_vision(v, vision, source):
    """Heads split the width evenly into a multiple of 4 (the 2D rotary gives a quarter of each head to rows and
    to columns, in cos/sin pairs), a square position table, and the activation the course implements."""
    if v["hidden_size"] % v["num_heads"] or (v["hidden_size"] // v["num_heads"]) % 4:
        raise _bad_field("vision_config.hidden_size", f"a multiple of 4 x num_heads ({4 * v['num_heads']})",
                         v["hidden_size"], source)
    if math.isqrt(v["num_position_embeddings"]) ** 2 != v["num_position_embeddings"]:
        raise _bad_field("vision_config.num_position_embeddings", "a square number (48 x 48 = 2304)",
                         v["num_position_embeddings"], source)
    if (act := vision.get("hidden_act", "gelu_pytorch_tanh")) != "gelu_pytorch_tanh":
        raise _bad_field("vision_config.hidden_act", "'gelu_pytorch_tanh'", act, source)


def mtp_layers(cfg):
    """How many decoder layers the multi-token-prediction head has (text_config's mtp_num_hidden_layers; 1 in 0.8B)."""
    raw = cfg.raw if isinstance(cfg, Config) else {}
    n = raw.get("text_config", raw).get("mtp_num_hidden_layers", 1)
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else 1
