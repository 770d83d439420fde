"""Find a Qwen3.5 checkpoint, read its config, and open its weights lazily.

A checkpoint is a folder: `config.json` (the numbers that fix every shape) and one or more
`.safetensors` files (the tensors). A safetensors file is simple enough to read by hand:

    [8 bytes: header length n, little-endian] [n bytes: JSON header] [raw tensor bytes]

The JSON says, for every tensor, its dtype, its shape and where its bytes start and end.
So we never need to read the 1.75 GB file to know what is in it, and when a tensor is asked
for we map just its bytes from disk (mmap): reading the 49 norm weights touches a few
hundred kilobytes, not the 508 MB embedding table. Tensors keep the dtype they were stored
in (bf16, a few fp32); the code that computes with them decides when to upcast.

Public API, used by every chapter and by learners' notebooks:

    from qwen.weights import Config, find_model, load, load_weights
    path = find_model()                     # a folder: given, $QWEN_MODEL, HF cache, or download
    cfg = Config.load(path)                 # cfg.hidden_size, cfg.layer_types, ...
    W = load_weights(path)                  # W["layers.0.input_layernorm.weight"] -> tensor
    load(module, W, "layers.0.input_layernorm.")   # strict, key by key
"""
import dataclasses
import difflib
import json
import math
import mmap
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from qwen.lang import QwenError, T

# torch is imported only where tensors are made: finding a model, reading a config or a header
# then costs no `import torch` (over a second), which keeps the judge and `main.py download` quick.

DEFAULT_REPO = "Qwen/Qwen3.5-0.8B"
INDEX_NAME = "model.safetensors.index.json"
# What the course reads from the Hub; the vision preprocessors, README and LICENSE stay behind.
COURSE_FILES = ["config.json", INDEX_NAME, "*.safetensors", "tokenizer.json",
                "tokenizer_config.json", "vocab.json", "merges.txt"]
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")

# safetensors dtype names -> (torch dtype name, bytes per element)
DTYPES = {
    "BF16": ("bfloat16", 2), "F16": ("float16", 2), "F32": ("float32", 4), "F64": ("float64", 8),
    "I64": ("int64", 8), "I32": ("int32", 4), "I16": ("int16", 2), "I8": ("int8", 1),
    "U8": ("uint8", 1), "BOOL": ("bool", 1),
}


# --------------------------------------------------------------------------------------------
# config.json
# --------------------------------------------------------------------------------------------

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
            raise _missing_path(path)
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


def read_json(file):
    """A JSON file of the checkpoint (config, tokenizer files), or a clear message when it is broken."""
    try:
        return json.loads(Path(file).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise QwenError("{file} is not valid JSON ({why}). Download it again.",
                        "{file} 不是合法的 JSON（{why}）。请重新下载。", file=file, why=e) from None


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


# --------------------------------------------------------------------------------------------
# find_model: where the checkpoint is
# --------------------------------------------------------------------------------------------

class ModelNotFound(QwenError):
    """No checkpoint on disk and none could be downloaded."""


def find_model(name_or_path=None, *, download=True):
    """The folder of a Qwen3.5 checkpoint.

    Looks, in order: the argument (a folder, or a Hub repo id), $QWEN_MODEL, the Hugging Face
    cache (no network), then downloads the files the course uses (resumable, with progress
    bars; honours HF_ENDPOINT, HF_HOME and HF_HUB_OFFLINE). Default repo: Qwen/Qwen3.5-0.8B.
    """
    for value, origin in ((name_or_path, "argument"), (os.environ.get("QWEN_MODEL"), "QWEN_MODEL")):
        if value:
            value = str(value)
            path = Path(value).expanduser()
            if path.exists():
                return _model_folder(path)
            if not _looks_like_repo_id(value):
                raise _missing_path(path, origin)
            return _from_hub(value, download)
    return _from_hub(DEFAULT_REPO, download)


def _looks_like_repo_id(value):
    return re.fullmatch(r"[\w.-]+/[\w.-]+", value) is not None and not value.startswith(".")


def _model_folder(path):
    folder = path if path.is_dir() else path.parent
    if not (folder / "config.json").is_file() and folder is not path:   # a file given: name it, not "."
        raise QwenError("{file} is a file, and its folder has no config.json. Pass the model folder, the one "
                        "that holds config.json and the .safetensors files (--model PATH or QWEN_MODEL).",
                        "{file} 是一个文件，它所在的文件夹里没有 config.json。请给出模型文件夹，即包含 config.json 和 "
                        ".safetensors 文件的那个（--model PATH 或 QWEN_MODEL）。", file=path)
    if not (folder / "config.json").is_file():
        Config.load(folder)                                # raises the "no config.json" message
    return folder


def _hub_offline():
    from huggingface_hub import constants
    env = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    return env or bool(constants.HF_HUB_OFFLINE)


def _complete(folder):
    """A cached snapshot is usable when config.json and every weights file are there (an
    interrupted download leaves some out; downloading again resumes it)."""
    if not (Path(folder) / "config.json").is_file():
        return False
    try:
        weight_files(folder)                               # raises when a shard of the index is missing
    except QwenError:
        return False
    return True


def _from_hub(repo, download):
    from huggingface_hub import constants, snapshot_download

    partial = False
    try:                                                   # 1. the cache, without the network
        cached = Path(snapshot_download(repo, allow_patterns=COURSE_FILES, local_files_only=True))
        if _complete(cached):
            return cached
        partial = True
    except (OSError, ValueError):                          # LocalEntryNotFoundError is an OSError
        pass
    offline = _hub_offline()
    if download and not offline:                           # 2. the Hub (or the mirror in HF_ENDPOINT)
        print(T("Downloading {repo} from {endpoint} into {cache} (once; an interrupted download resumes; "
                "Ctrl-C and --tiny to skip).", "正在从 {endpoint} 下载 {repo} 到 {cache}（只需一次；中断后可接着下载；"
                "按 Ctrl-C 并加 --tiny 可跳过）。", repo=repo, endpoint=constants.ENDPOINT, cache=constants.HF_HUB_CACHE),
              file=sys.stderr, flush=True)
        try:
            return _model_folder(Path(snapshot_download(repo, allow_patterns=COURSE_FILES)))
        except KeyboardInterrupt:
            raise
        except Exception as e:                             # network, auth, disk: all end the same way
            reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    else:
        reason = "HF_HUB_OFFLINE is set" if offline else "download=False"
    if partial:
        reason += "; the cached copy is incomplete"
    raise ModelNotFound(
        "Could not find {repo}. Looked in: $QWEN_MODEL ({env_en}), the Hugging Face cache "
        "({cache}), then the Hub at {endpoint} ({reason}).\n"
        "  Download it:            {get}\n"
        "  Through a mirror:       HF_ENDPOINT=<mirror URL> {get}\n"
        "  Already have a folder:  python main.py --model PATH   (or set QWEN_MODEL=PATH)\n"
        "  No model at all:        python main.py --tiny   (built-in tiny checkpoint, made-up numbers)",
        "找不到 {repo}。查找过：$QWEN_MODEL（{env_zh}）、Hugging Face 缓存（{cache}）、"
        "Hub {endpoint}（{reason}）。\n"
        "  下载模型：          {get}\n"
        "  通过镜像下载：      HF_ENDPOINT=<镜像地址> {get}\n"
        "  已有模型文件夹：    python main.py --model PATH   （或设置 QWEN_MODEL=PATH）\n"
        "  完全没有模型：      python main.py --tiny   （内置的小检查点，数值是编造的）",
        repo=repo, env_en=os.environ.get("QWEN_MODEL") or "not set", env_zh=os.environ.get("QWEN_MODEL") or "未设置",
        get="python main.py download" + ("" if repo == DEFAULT_REPO else f" --model {repo}"), cache=constants.HF_HUB_CACHE,
        endpoint=constants.ENDPOINT, reason=reason)


def _missing_path(path, origin="path"):
    return QwenError("{path} does not exist ({origin}). Check the spelling, or leave it out to "
                     "use the downloaded model.",
                     "{path} 不存在（来自 {origin}）。请检查拼写，或者不指定它，使用下载的模型。",
                     path=path, origin=origin)


# --------------------------------------------------------------------------------------------
# safetensors, read by hand
# --------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lives: everything but its values."""
    name: str                          # full name as stored, e.g. model.language_model.norm.weight
    dtype: str                         # safetensors name: BF16, F32, ...
    shape: tuple
    file: Path
    offset: int                        # absolute byte offset of the first element in the file
    nbytes: int

    @property
    def numel(self):
        return math.prod(self.shape)

    @property
    def torch_dtype(self):
        import torch
        return getattr(torch, DTYPES[self.dtype][0])


def read_header(file):
    """Parse one .safetensors header: ({name: TensorInfo}, metadata or None). Reads no tensor data."""
    file = Path(file)
    size = file.stat().st_size
    with open(file, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise _broken(file, "it is {size} bytes long, shorter than the 8-byte length prefix",
                          "文件只有 {size} 字节，比 8 字节的长度前缀还短", size=size)
        n = int.from_bytes(head, "little")                 # header length, little-endian u64
        if 8 + n > size:
            raise _broken(file, "its header claims {n:,} bytes but the file has only {size:,}",
                          "文件头声称有 {n:,} 字节，但整个文件只有 {size:,} 字节", n=n, size=size)
        raw = f.read(n)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _broken(file, "its header is not JSON ({why})", "文件头不是 JSON（{why}）", why=e) from None
    if not isinstance(header, dict):
        raise _broken(file, "its header is not a JSON object", "文件头不是 JSON 对象")
    metadata = header.pop("__metadata__", None)
    data_start, data_size = 8 + n, size - 8 - n
    infos = {}
    for name, entry in header.items():
        try:
            dtype, shape, (begin, end) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
            itemsize = DTYPES[dtype][1]
            assert all(isinstance(d, int) and d >= 0 for d in shape) and 0 <= begin <= end
        except (KeyError, TypeError, ValueError, AssertionError):
            raise _broken(file, "the header entry for {name} is malformed: {entry}",
                          "文件头里 {name} 的条目格式不对：{entry}", name=name, entry=entry) from None
        if end > data_size:
            raise _broken(file, "{name} ends at data byte {end:,} but the file holds only {have:,}: "
                          "it is truncated (an interrupted download?)",
                          "{name} 的数据应到第 {end:,} 字节，但文件只有 {have:,} 字节：文件被截断了"
                          "（下载中断？）", name=name, end=end, have=data_size)
        if end - begin != math.prod(shape) * itemsize:
            raise _broken(file, "{name} has {got:,} bytes, but {dtype} {shape} needs {need:,}",
                          "{name} 有 {got:,} 字节，但 {dtype} {shape} 需要 {need:,} 字节",
                          name=name, got=end - begin, dtype=dtype, shape=list(shape),
                          need=math.prod(shape) * itemsize)
        infos[name] = TensorInfo(name, dtype, shape, file, data_start + begin, end - begin)
    return infos, metadata


def _broken(file, en, zh, **fields):
    return QwenError("{file} is not a valid safetensors file: " + en + ". Delete it and download again.",
                     "{file} 不是有效的 safetensors 文件：" + zh + "。请删除后重新下载。",
                     file=file, **fields)


# --------------------------------------------------------------------------------------------
# load_weights: a lazy {short name: tensor} mapping over all the files
# --------------------------------------------------------------------------------------------

LM_PREFIXES = ("model.language_model.", "model.")  # multimodal layout, text-only layout
HIDDEN_PREFIXES = ("model.visual.", "mtp.")         # kept out of the default view


def short_name(full):
    """model.language_model.layers.0.x -> layers.0.x; None for vision and mtp tensors."""
    if full.startswith(HIDDEN_PREFIXES):
        return None
    for prefix in LM_PREFIXES:
        if full.startswith(prefix):
            return full[len(prefix):]
    return full                                    # lm_head.weight lives at the top level


class UnknownTensor(QwenError, KeyError):
    """W[name] with a name the checkpoint does not have."""


class Weights(Mapping):
    """{short name: tensor} for the language model, read from disk only when asked for.

    `W["norm.weight"]` and `W["model.language_model.norm.weight"]` are the same tensor;
    vision (`model.visual.*`) and multi-token-prediction (`mtp.*`) tensors are not listed by
    iteration but can be read by their full names (see `W.all_names`).
    """

    def __init__(self, infos, folder):
        self.folder = Path(folder)
        self._infos = infos                                      # full name -> TensorInfo
        self._short = {s: f for f in infos if (s := short_name(f)) is not None}
        self._maps = {}                                          # file -> mmap, opened on first use

    def __getitem__(self, name):
        import torch
        info = self.info(name)
        if info.numel == 0:
            return torch.empty(info.shape, dtype=info.torch_dtype)
        buffer = self._map(info.file)
        flat = torch.frombuffer(buffer, dtype=info.torch_dtype, count=info.numel, offset=info.offset)
        return flat.view(info.shape)                             # no copy: pages load when touched

    def rows(self, name, ids):
        """Only the given rows (along the first dimension) of a tensor, read with plain file reads:
        (len(ids), ...). For a few rows of a big table: mapping them in would bring whole
        pages (and on many systems much larger blocks) of the file into memory."""
        import torch
        info = self.info(name)
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < info.shape[0]]
        if bad:
            raise QwenError("Row {i} is outside {name} (rows 0..{top}).", "第 {i} 行超出了 {name} 的范围（行 0..{top}）。",
                            i=bad[0], name=name, top=info.shape[0] - 1)
        size = info.nbytes // info.shape[0] if info.shape[0] else 0
        out = bytearray(len(ids) * size)
        view = memoryview(out)
        with open(info.file, "rb") as f:
            for k, i in enumerate(ids):
                f.seek(info.offset + i * size)
                f.readinto(view[k * size:(k + 1) * size])
        if not out:
            return torch.empty((len(ids), *info.shape[1:]), dtype=info.torch_dtype)
        return torch.frombuffer(out, dtype=info.torch_dtype).view(len(ids), *info.shape[1:])

    def __iter__(self):
        return iter(self._short)

    def __len__(self):
        return len(self._short)

    def __contains__(self, name):
        return name in self._short or name in self._infos

    def __repr__(self):
        return f"Weights({self.folder}, {len(self)} language-model tensors, {len(self._infos)} in all)"

    @property
    def all_names(self):
        """Every tensor name as stored, vision and mtp included."""
        return list(self._infos)

    def info(self, name):
        """Shape, dtype, file and byte range of a tensor, without reading it."""
        full = self._short.get(name, name)
        if full not in self._infos:
            raise self._unknown(name)
        return self._infos[full]

    def shape(self, name):
        return self.info(name).shape

    def dtype(self, name):
        return self.info(name).torch_dtype

    def names_under(self, prefix):
        """Names (short or full, as the prefix is written) that start with prefix."""
        found = [n for n in self._short if n.startswith(prefix)]
        return found + [n for n in self._infos if n.startswith(prefix) and n not in self._short]

    def _map(self, file):
        if file not in self._maps:
            with open(file, "rb") as f:                          # a private copy-on-write mapping:
                self._maps[file] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        return self._maps[file]                                  # writes never reach the file

    def _unknown(self, name):
        close = difflib.get_close_matches(name, list(self._short) + list(self._infos), n=3, cutoff=0.6)
        hint_en = f" Did you mean: {', '.join(close)}?" if close else ""
        hint_zh = f" 你是不是想写：{'、'.join(close)}？" if close else ""
        return UnknownTensor("No tensor named {name!r} in {folder}.{hint}",
                             "{folder} 里没有名为 {name!r} 的张量。{hint_zh}",
                             name=name, folder=self.folder, hint=hint_en, hint_zh=hint_zh)


def weight_files(folder):
    """The .safetensors files of a checkpoint folder: from the index, else model.safetensors, else all."""
    folder = Path(folder)
    index = folder / INDEX_NAME
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            names = sorted(set(weight_map.values()))
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as e:
            raise QwenError("{file} is not a valid index (it needs a \"weight_map\" object): {why}. "
                            "Download it again.",
                            "{file} 不是有效的索引文件（需要 \"weight_map\" 对象）：{why}。请重新下载。",
                            file=index, why=e) from None
        for name in names:
            if not (folder / name).is_file():
                raise QwenError("{index} lists the shard {name}, but {folder} has no such file. "
                                "The download is incomplete: run `python main.py download` again.",
                                "{index} 列出了分片 {name}，但 {folder} 里没有这个文件。下载不完整："
                                "请再运行一次 `python main.py download`。",
                                index=index.name, name=name, folder=folder)
        return [folder / n for n in names], weight_map
    if (folder / "model.safetensors").is_file():
        return [folder / "model.safetensors"], None
    shards = sorted(folder.glob("*.safetensors"))
    if shards:
        return shards, None
    pickles = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        raise QwenError("{folder} holds only pickle weights ({names}). The course reads safetensors "
                        "only: unpickling a file can run arbitrary code. Download the safetensors "
                        "version of the model.",
                        "{folder} 里只有 pickle 格式的权重（{names}）。本课程只读 safetensors："
                        "反序列化 pickle 可能执行任意代码。请下载 safetensors 版本的模型。",
                        folder=folder, names=", ".join(pickles))
    raise QwenError("{folder} has no .safetensors weights. Download the model "
                    "(python main.py download) or pass the folder that holds them.",
                    "{folder} 里没有 .safetensors 权重。请下载模型（python main.py download），"
                    "或给出存放权重的文件夹。", folder=folder)


def load_weights(path):
    """Open a checkpoint's weights lazily: only headers are read now."""
    path = Path(path).expanduser()
    if not path.exists():
        raise _missing_path(path)
    if path.is_file() and path.suffix == ".safetensors":
        files, weight_map, folder = [path], None, path.parent
    else:
        (files, weight_map), folder = weight_files(path), path
    infos = {}
    for file in files:
        header, _ = read_header(file)
        for name, info in header.items():
            if name in infos:
                raise QwenError("The tensor {name} is stored twice: in {a} and in {b}.",
                                "张量 {name} 被存了两次：{a} 和 {b}。",
                                name=name, a=infos[name].file.name, b=file.name)
            infos[name] = info
    for name, file in (weight_map or {}).items():
        if name not in infos or infos[name].file.name != file:
            raise QwenError("{index} says {name} is in {file}, but that file's header does not list it.",
                            "{index} 说 {name} 在 {file} 里，但该文件的文件头里没有它。",
                            index=INDEX_NAME, name=name, file=file)
    return Weights(infos, folder)


# --------------------------------------------------------------------------------------------
# load: fill a module's parameters, key by key
# --------------------------------------------------------------------------------------------

def load(module, W, prefix=""):
    """Fill `module` from W under `prefix`, strictly, and return it.

    Every parameter and buffer of the module must find a key `prefix + name` of the same shape,
    and every key under prefix must be used. Tensors keep their stored dtype (bf16 stays bf16).
    """
    if prefix and not prefix.endswith("."):
        prefix += "."
    wanted = module.state_dict()
    state = {}
    for name, current in wanted.items():
        key = prefix + name
        if key not in W:
            raise W._unknown(key)
        stored = W.shape(key)
        if tuple(current.shape) != stored:
            raise QwenError("Shape mismatch for {key}: the module expects {want}, the checkpoint "
                            "has {got}. Check the config numbers used to build the module.",
                            "{key} 的形状不匹配：模块需要 {want}，检查点里是 {got}。"
                            "请检查构建模块时用的配置数值。",
                            key=key, want=list(current.shape), got=list(stored))
        state[name] = W[key]
    unexpected = [k for k in W.names_under(prefix) if k[len(prefix):] not in wanted]
    if unexpected:
        raise QwenError("Unexpected key {key} under {prefix!r}: {module} has no parameter {name!r}.",
                        "{prefix!r} 下多出了键 {key}：{module} 没有参数 {name!r}。",
                        key=unexpected[0], prefix=prefix, module=type(module).__name__,
                        name=unexpected[0][len(prefix):])
    module.load_state_dict(state, strict=True, assign=True)   # assign: keep the stored tensors
    return module
