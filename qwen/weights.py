"""Open a checkpoint's weights lazily: safetensors read by hand, a {name: tensor} mapping that
reads from disk only when asked, and `load`, which fills a module key by key.

A checkpoint is a folder: `config.json` (the numbers that fix every shape, see qwen/config.py)
and one or more `.safetensors` files (the tensors). A safetensors file is simple enough to read
by hand:

    [8 bytes: header length n, little-endian] [n bytes: JSON header] [raw tensor bytes]

The JSON says, for every tensor, its dtype, its shape and where its bytes start and end.
So we never need to read the 1.75 GB file to know what is in it, and when a tensor is asked
for we map just its bytes from disk (mmap): reading the 49 norm weights touches a few
hundred kilobytes, not the 508 MB embedding table. Tensors keep the dtype they were stored
in (bf16, a few fp32); the code that computes with them decides when to upcast.

Public API, used by every chapter and by learners' notebooks:

    from qwen.weights import Config, load, load_weights

    from engine.hub import find_model
    path = find_model()                     # a folder: given, $QWEN_MODEL, HF cache, or download
    cfg = Config.load(path)                 # cfg.hidden_size, cfg.layer_types, ...
    W = load_weights(path)                  # W["layers.0.input_layernorm.weight"] -> tensor
    load(module, W, "layers.0.input_layernorm.")   # strict, key by key

(Config lives in qwen/config.py and find_model in engine/hub.py; both are importable from here.)

Each section below reads top to bottom as the happy path; what can be wrong with a file is
checked in one place per section (`_check_*`), and every failure is one line naming the file.
A mapped file that shrinks later would kill the process (a bus error) when its pages are read,
so every access first checks that the file is still the one that was opened (same inode, size
and modification time; a file rewritten in place would otherwise be read silently): two `stat`
calls, microseconds. Tensors handed out before the file changed cannot be protected that way;
run again after a re-download.
"""
import dataclasses
import difflib
import json
import math
import mmap
import operator
import os
from collections.abc import Mapping
from pathlib import Path

from qwen.config import Config, VisionConfig, language_model_shapes, read_json, vision_shapes  # noqa: F401  (Config, read_json: re-exported)
from qwen.files import INDEX_NAME, PICKLE_SUFFIXES, kind_of, missing_path, open_file, weight_files  # noqa: F401  (INDEX_NAME, PICKLE_SUFFIXES: re-exported)
from qwen.lang import QwenError

# torch is imported only where tensors are made: finding a model, reading a config or a header
# then costs no `import torch` (over a second), which keeps the judge and `main.py download` quick.

MAX_HEADER_BYTES = 100_000_000         # as the safetensors library: the real header is ~40 KB

# safetensors dtype names -> (torch dtype name, bytes per element)
DTYPES = {
    "BF16": ("bfloat16", 2), "F16": ("float16", 2), "F32": ("float32", 4), "F64": ("float64", 8),
    "I64": ("int64", 8), "I32": ("int32", 4), "I16": ("int16", 2), "I8": ("int8", 1),
    "U8": ("uint8", 1), "BOOL": ("bool", 1),
}


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
    infos, metadata, _ = _read_header(file)
    return infos, metadata


def _read_header(file):
    """read_header, plus the file's identity (device, inode, size, modification time) when it was read."""
    file = Path(file)
    with open_file(file) as f:
        st = os.fstat(f.fileno())
        head = f.read(8)
        n = int.from_bytes(head, "little")                 # header length, little-endian u64
        _check_length(file, len(head), n, st.st_size)
        raw = f.read(n)
    header = _parse_header(file, raw)
    metadata = header.pop("__metadata__", None)
    data_start, data_size = 8 + n, st.st_size - 8 - n
    infos = {}
    for name, entry in header.items():
        dtype, shape, (begin, end) = _check_entry(file, name, entry, data_size)
        infos[name] = TensorInfo(name, dtype, shape, file, data_start + begin, end - begin)
    _check_no_overlap(file, infos.values())
    return infos, metadata, _identity(st)


def _identity(st):
    """What tells a file apart from its replacement or its rewrite: device, inode, size, modification time."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


# What a header can get wrong, checked in the order the file is read.

def _check_length(file, got, n, size):
    if got < 8:
        raise _broken(file, "it is {size} bytes long, shorter than the 8-byte length prefix",
                      "文件只有 {size} 字节，比 8 字节的长度前缀还短", size=size)
    if n > MAX_HEADER_BYTES:                               # refused before reading it
        raise _broken(file, "its header claims {n:,} bytes, over the {top:,}-byte limit of the format's "
                      "readers (a real header is about 40 KB)",
                      "文件头声称有 {n:,} 字节，超过了读取器的上限 {top:,} 字节（真实的文件头约 40 KB）",
                      n=n, top=MAX_HEADER_BYTES)
    if 8 + n > size:
        raise _broken(file, "its header claims {n:,} bytes but the file has only {size:,}",
                      "文件头声称有 {n:,} 字节，但整个文件只有 {size:,} 字节", n=n, size=size)


def _parse_header(file, raw):
    try:
        header = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise _broken(file, "its header is not UTF-8 text (byte {pos:,})", "文件头不是 UTF-8 文本（第 {pos:,} 字节）",
                      pos=e.start) from None
    except json.JSONDecodeError as e:
        raise _broken(file, "its header is not JSON ({why})", "文件头不是 JSON（{why}）", why=e) from None
    except RecursionError:
        raise _broken(file, "its header is not JSON (nested too deeply)", "文件头不是 JSON（嵌套太深）") from None
    if not isinstance(header, dict) or not isinstance(header.get("__metadata__", {}), dict):
        raise _broken(file, "its header is not a JSON object of tensors", "文件头不是由张量组成的 JSON 对象")
    return header


def _is_count(x):
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0       # 8.0 and true are not counts


def _check_entry(file, name, entry, data_size):
    """(dtype, shape, (begin, end)) of one header entry, or the message that says what is wrong."""
    try:
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        assert isinstance(shape, list) and all(_is_count(d) for d in shape)
        assert math.prod(max(d, 1) for d in shape) < 2**63      # torch's sizes and strides are int64, even when empty
        assert isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(o) for o in offsets)
        assert isinstance(dtype, str) and offsets[0] <= offsets[1]
    except (KeyError, TypeError, AssertionError):
        shown = json.dumps(entry)
        shown = shown if len(shown) <= 120 else shown[:100] + "..."
        raise _broken(file, "the header entry for {name} is malformed: {entry} (it needs \"dtype\", "
                      "\"shape\": whole numbers under 2^63 together, \"data_offsets\": [begin, end] whole numbers)",
                      "文件头里 {name} 的条目格式不对：{entry}（需要 \"dtype\"、\"shape\"：乘积小于 2^63 的整数、"
                      "\"data_offsets\"：[起点, 终点] 整数）", name=name, entry=shown) from None
    if dtype not in DTYPES:
        raise QwenError("{file}: {name} has the unsupported dtype {dtype}; this course reads "
                        "{known}. Use a checkpoint stored in one of them (Qwen3.5's is BF16).",
                        "{file}：{name} 的数据类型 {dtype} 不受支持；本课程能读 {known}。"
                        "请使用以这些类型存储的检查点（Qwen3.5 用的是 BF16）。",
                        file=file, name=name, dtype=dtype, known=", ".join(DTYPES))
    begin, end = offsets
    if end > data_size:
        raise _broken(file, "{name} ends at data byte {end:,} but the file holds only {have:,}: "
                      "it is truncated (an interrupted download?)",
                      "{name} 的数据应到第 {end:,} 字节，但文件只有 {have:,} 字节：文件被截断了"
                      "（下载中断？）", name=name, end=end, have=data_size)
    need = math.prod(shape) * DTYPES[dtype][1]
    if end - begin != need:
        raise _broken(file, "{name} has {got:,} bytes, but {dtype} {shape} needs {need:,}",
                      "{name} 有 {got:,} 字节，但 {dtype} {shape} 需要 {need:,} 字节",
                      name=name, got=end - begin, dtype=dtype, shape=shape, need=need)
    return dtype, tuple(shape), (begin, end)


def _check_no_overlap(file, infos):
    """Each byte belongs to at most one tensor: two names for the same bytes would make editing
    one silently change the other."""
    spans = sorted((i.offset, i.offset + i.nbytes, i.name) for i in infos if i.nbytes)
    for (_, end_a, a), (begin_b, _, b) in zip(spans, spans[1:]):
        if begin_b < end_a:
            raise _broken(file, "{a} and {b} share bytes (their data_offsets overlap)",
                          "{a} 和 {b} 的数据重叠（data_offsets 有交叠）", a=a, b=b)


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

    def __init__(self, infos, folder, identities=None):
        self.folder = Path(folder)
        self._infos = infos                                      # full name -> TensorInfo
        self._short = {s: f for f in infos if (s := short_name(f)) is not None}
        self._identities = identities or {}                      # file -> _identity() at opening
        self._maps = {}                                          # file -> (file descriptor, mmap), on first use
        self.finite = set()                                      # full names checked for NaN and inf

    def __getitem__(self, name):
        import torch
        info = self.info(name)
        if info.numel == 0:
            return torch.empty(info.shape, dtype=info.torch_dtype)
        self.check_finite(name)
        buffer = self._map(info.file)
        flat = torch.frombuffer(buffer, dtype=info.torch_dtype, count=info.numel, offset=info.offset)
        return flat.view(info.shape)                             # no copy: pages load when touched

    def rows(self, name, ids):
        """Only the given rows (along the first dimension) of a tensor, read with plain file reads:
        (len(ids), ...). For a few rows of a big table: mapping them in would bring whole
        pages (and on many systems much larger blocks) of the file into memory."""
        import torch
        info = self.info(name)
        if not info.shape:
            raise QwenError("{name} is a single number (shape []): it has no rows. Use W[{name!r}].",
                            "{name} 是单个数（形状 []）：它没有行。请用 W[{name!r}]。", name=name)
        ids = _row_ids(ids, name)
        bad = [i for i in ids if not 0 <= i < info.shape[0]]
        if bad:
            raise QwenError("Row {i} is outside {name} (rows 0..{top}).", "第 {i} 行超出了 {name} 的范围（行 0..{top}）。",
                            i=bad[0], name=name, top=info.shape[0] - 1)
        size = info.nbytes // info.shape[0] if info.shape[0] else 0
        out = bytearray(len(ids) * size)
        view = memoryview(out)
        if out:
            with open_file(info.file) as f:
                self._check_unchanged(info.file, f.fileno())
                for k, i in enumerate(ids):
                    f.seek(info.offset + i * size)
                    if f.readinto(view[k * size:(k + 1) * size]) != size:   # the file got shorter
                        raise self._changed(info.file)
        if not out:
            return torch.empty((len(ids), *info.shape[1:]), dtype=info.torch_dtype)
        picked = torch.frombuffer(out, dtype=info.torch_dtype).view(len(ids), *info.shape[1:])
        if info.dtype in FLOAT_DTYPES and not torch.isfinite(picked).all():
            flat = picked.reshape(len(ids), -1)
            k, j = ((~torch.isfinite(flat)).nonzero()[0]).tolist()                    # the first bad row, column
            raise not_finite(info, ids[k] * flat.shape[1] + j, flat[k, j])
        return picked

    def check_finite(self, name):
        """One line naming the file and the tensor when it holds a NaN or an infinity: every number
        computed from it would be one too, and a chapter or the judge would print or pass on `nan`.
        Read with plain file reads a block at a time (none of its pages stays mapped, so a large
        table adds nothing to the process's memory); once per tensor, floating-point ones only."""
        import torch
        info = self.info(name)
        if info.name in self.finite or info.dtype not in FLOAT_DTYPES or not info.numel:
            return
        size = DTYPES[info.dtype][1]
        block = torch.empty(CHECK_BYTES - CHECK_BYTES % size, dtype=torch.uint8)
        with open_file(info.file) as f:
            self._check_unchanged(info.file, f.fileno())
            f.seek(info.offset)
            for start in range(0, info.nbytes, len(block)):
                raw = block[:min(len(block), info.nbytes - start)]
                if f.readinto(memoryview(raw.numpy())) != len(raw):
                    raise self._changed(info.file)
                check_finite_block(info, raw.view(info.torch_dtype), start // size)
        self.finite.add(info.name)

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
        if not isinstance(name, str):
            raise QwenError("Tensor names are strings, not {v!r} ({t}).", "张量名是字符串，而不是 {v!r}（{t}）。",
                            v=name, t=type(name).__name__)
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
            with open_file(file) as f:                           # kept open as a bare descriptor, for the checks
                fd = os.dup(f.fileno())
            try:
                self._check_unchanged(file, fd)                  # a private copy-on-write mapping:
                self._maps[file] = fd, mmap.mmap(fd, 0, access=mmap.ACCESS_COPY)
            except (OSError, ValueError, QwenError) as e:        # e.g. the file was emptied just now
                os.close(fd)
                raise e if isinstance(e, QwenError) else self._changed(file) from None
        else:
            self._check_unchanged(file, self._maps[file][0])
        return self._maps[file][1]                               # writes never reach the file

    def __del__(self):
        for fd, _ in getattr(self, "_maps", {}).values():        # the mappings close themselves
            try:
                os.close(fd)
            except OSError:
                pass

    def _check_unchanged(self, file, fd):
        """Reading mapped pages past a file's new end is a bus error, not an exception, and pages
        rewritten in place would be read silently: so before each access, the file under its name
        and the one held open must both be the one opened then (device, inode, size, modification time)."""
        if file not in self._identities:
            return
        try:
            there = _identity(os.stat(file))
        except OSError:
            there = None
        if not _identity(os.fstat(fd)) == there == self._identities[file]:
            raise self._changed(file)

    def _changed(self, file):
        return QwenError("{file}: the file changed on disk since it was opened (a new download?); run again.",
                         "{file}：文件在打开之后被改动了（重新下载了？）；请重新运行。", file=file)

    def _unknown(self, name):
        close = difflib.get_close_matches(name, list(self._short) + list(self._infos), n=3, cutoff=0.6)
        hint_en = f" Did you mean: {', '.join(close)}?" if close else ""
        hint_zh = f" 你是不是想写：{'、'.join(close)}？" if close else ""
        return UnknownTensor("No tensor named {name!r} in {folder}.{hint}",
                             "{folder} 里没有名为 {name!r} 的张量。{hint_zh}",
                             name=name, folder=self.folder, hint=hint_en, hint_zh=hint_zh)


def _row_ids(ids, name):
    try:
        return [_row_id(i, name) for i in ids]
    except TypeError:                                            # not iterable: 3, None, a 0-d tensor
        raise QwenError("Rows of {name} are picked by a list of whole numbers, not {v!r} ({t}).",
                        "{name} 的行要用整数列表来选，而不是 {v!r}（{t}）。",
                        name=name, v=ids, t=type(ids).__name__) from None


def _row_id(i, name):
    try:
        if not isinstance(i, bool):
            return operator.index(i)                             # ints, numpy ints, integer tensors
    except TypeError:
        pass
    raise QwenError("Rows of {name} are picked by whole numbers, not {v!r} ({t}).",
                    "{name} 的行要用整数来选，而不是 {v!r}（{t}）。", name=name, v=i, t=type(i).__name__)


def load_weights(path):
    """Open a checkpoint's weights lazily: only headers are read now."""
    path = Path(path).expanduser()
    kind = kind_of(path)
    if kind is None:
        raise missing_path(path)
    if kind == "file":
        _check_single_file(path)
        files, weight_map, folder = [path], None, path.parent
    else:
        (files, weight_map), folder = weight_files(path), path
    infos, identities = {}, {}
    for file in files:
        header, _, identities[file] = _read_header(file)
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
    if kind == "folder" and kind_of(folder / "config.json") == "file":
        check_config(Config.load(folder), infos)             # before any module is built from it
    return Weights(infos, folder, identities)


FLOAT_DTYPES = ("BF16", "F16", "F32", "F64")
CHECK_BYTES = 1 << 24                   # read 16 MB at a time to look for NaN and inf


def check_finite_block(info, values, first):
    """One line (not_finite) when the flat block `values` of the tensor `info`, starting at its
    element `first`, holds a NaN or an infinity."""
    import torch
    ok = torch.isfinite(values)
    if not ok.all():
        i = int((~ok).nonzero()[0, 0])
        raise not_finite(info, first + i, values[i])


def not_finite(info, index, value):
    """The one line for a tensor that holds a NaN or an infinity at flat `index`."""
    where = []
    for d in reversed(info.shape):                                  # the flat index as one per dimension
        where.insert(0, index % d)
        index //= d
    return QwenError("{file}: {name}{where} is {v}: a model's weights are finite numbers, and every result computed "
                     "from this one would be {v} too. The file is damaged or was saved from a model that diverged; "
                     "download the model again.",
                     "{file}：{name}{where} 是 {v}：模型权重应是有限的数，用它算出的每个结果也都会是 {v}。文件已损坏，"
                     "或是从一个发散了的模型保存的；请重新下载模型。",
                     file=info.file, name=info.name, where=where or "", v=float(value))


def check_config(cfg, infos):
    """The config's numbers against the tensors' shapes, before any module is built from them:
    a config that does not belong to these weights is caught here, not by an allocation of
    the wrong size (or a shape error deep inside a chapter). The model's weights must also be
    floating point: integers read as weights would give numbers that mean nothing."""
    expected, vision = language_model_shapes(cfg), _vision_shapes(cfg, infos)
    for full, info in infos.items():
        want = expected.get(short_name(full)) or vision.get(full)
        if want is not None and info.dtype not in FLOAT_DTYPES:
            raise QwenError("{file}: {name} is stored as {dtype}, but a model's weights are floating-point "
                            "numbers ({floats}; Qwen3.5's are BF16, a few F32). Download the model again.",
                            "{file}：{name} 存成了 {dtype}，但模型权重应是浮点数（{floats}；Qwen3.5 用 BF16，"
                            "少数为 F32）。请重新下载模型。", file=info.file, name=full, dtype=info.dtype,
                            floats=", ".join(FLOAT_DTYPES))
        if want is not None and tuple(want[0]) != info.shape:
            raise QwenError("{config} and the weights disagree: by the config, {name} has shape {want}, "
                            "but {file} stores {got}. They belong to different models; download them "
                            "together again.",
                            "{config} 和权重对不上：按配置，{name} 的形状是 {want}，但 {file} 里存的是 {got}。"
                            "它们属于不同的模型；请一起重新下载。", config=cfg.source, name=full,
                            want=list(want[0]), file=info.file.name, got=list(info.shape))


def _vision_shapes(cfg, infos):
    """{full name: (shape, dtype)} of the tower's tensors by config.json's vision_config, when the
    folder has them; {} for a text-only export, and for a vision_config that cannot be read (that is
    said when the tower is built, load_model with vision: the text chapters never need it)."""
    if not any(name.startswith("model.visual.") for name in infos) or not isinstance(cfg.raw.get("vision_config"), dict):
        return {}
    try:
        vcfg = VisionConfig.from_config(cfg)
    except QwenError:
        return {}
    return vision_shapes(vcfg, out_hidden=cfg.hidden_size)


# What a folder or an index can get wrong.

def _check_single_file(path):
    if path.suffix != ".safetensors":
        raise QwenError("{path} is a file; give the folder that holds it (the folder with config.json "
                        "and the .safetensors files), or a .safetensors file.",
                        "{path} 是一个文件；请给出它所在的文件夹（包含 config.json 和 .safetensors 文件的"
                        "文件夹），或一个 .safetensors 文件。", path=path)


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
