"""config.json: the numbers that fix every shape of the model.

Qwen3.5's config comes in two layouts: the multimodal checkpoint nests the language model's
numbers under "text_config", a text-only export has them at the top level. `Config` reads
either and keeps only what the course uses, each number checked once, here.

    cfg = Config.load(path)          # cfg.hidden_size, cfg.layer_types, ...
"""
import dataclasses
from pathlib import Path

from qwen.files import missing_path, read_json
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

    INTS = ("hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
            "num_key_value_heads", "head_dim", "linear_num_key_heads", "linear_num_value_heads",
            "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim", "vocab_size")

    @classmethod
    def load(cls, path):
        """Read config.json from a model folder (or the file itself)."""
        path = Path(path).expanduser()
        file = path / "config.json" if path.is_dir() else path
        if not path.exists():
            raise missing_path(path)
        if not file.is_file():
            raise QwenError(
                "{folder} has no config.json, so it is not a model folder. Pass the folder that "
                "holds config.json and the .safetensors files (--model PATH or QWEN_MODEL).",
                "{folder} 里没有 config.json，所以不是模型文件夹。请给出包含 config.json 和 "
                ".safetensors 文件的文件夹（--model PATH 或 QWEN_MODEL）。", folder=path)
        raw = read_json(file)
        if not isinstance(raw, dict):
            raise QwenError("{file} should hold a JSON object.", "{file} 应当是一个 JSON 对象。",
                            file=file)
        return cls.from_dict(raw, source=str(file))

    @classmethod
    def from_dict(cls, raw, source="config.json"):
        # Multimodal checkpoints nest the language model under text_config; text-only exports don't.
        text = raw.get("text_config", raw)
        if not isinstance(text, dict):
            raise _bad_field("text_config", "a JSON object", text, source)
        values = {}
        for name in cls.INTS:
            values[name] = _field(text, name, int, source)
        values["rms_norm_eps"] = float(_field(text, "rms_norm_eps", float, source))
        tie = text.get("tie_word_embeddings", raw.get("tie_word_embeddings", False))
        if not isinstance(tie, bool):
            raise _bad_field("tie_word_embeddings", "true or false", tie, source)
        values["tie_word_embeddings"] = tie
        values["layer_types"] = _layer_types(text, values["num_hidden_layers"], source)
        return cls(**values, source=source, raw=raw)

    @property
    def full_attention_layers(self):
        return [i for i, t in enumerate(self.layer_types) if t == "full_attention"]

    @property
    def linear_attention_layers(self):
        return [i for i, t in enumerate(self.layer_types) if t == "linear_attention"]


def _field(d, name, kind, source):
    if name not in d:
        raise QwenError("{source}: the field {name!r} is missing. The file is incomplete or not a "
                        "Qwen3.5 config; download it again.",
                        "{source}：缺少字段 {name!r}。文件不完整或不是 Qwen3.5 的配置，请重新下载。",
                        source=source, name=name)
    value = d[name]
    ok = isinstance(value, (int, float)) if kind is float else isinstance(value, kind)
    if isinstance(value, bool) or not ok or (kind is int and value <= 0):
        raise _bad_field(name, "a positive integer" if kind is int else "a number", value, source)
    return value


def _bad_field(name, wanted, value, source):
    return QwenError("{source}: the field {name!r} should be {wanted}, but it is {value!r}.",
                     "{source}：字段 {name!r} 应当是 {wanted}，实际是 {value!r}。",
                     source=source, name=name, wanted=wanted, value=value)


def _layer_types(text, n_layers, source):
    types = text.get("layer_types")
    if types is None:                   # older exports: every interval-th layer is full attention
        interval = _field(text, "full_attention_interval", int, source)
        return tuple("full_attention" if (i + 1) % interval == 0 else "linear_attention"
                     for i in range(n_layers))
    allowed = {"full_attention", "linear_attention"}
    if not isinstance(types, list) or len(types) != n_layers or not set(types) <= allowed:
        raise _bad_field("layer_types", f"a list of {n_layers} entries, each one of "
                         "'linear_attention' / 'full_attention'", types, source)
    return tuple(types)


