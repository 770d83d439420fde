"""Open a checkpoint's weights lazily: safetensors read by hand, a {name: tensor} mapping that
reads from disk only when asked, and `load`, which fills a module strictly, key by key (every
parameter finds a key of its shape, every key under the prefix is used).

A checkpoint is a folder: config.json (qwen/config.py) and .safetensors files, each

    [8 bytes: header length n, little-endian] [n bytes: JSON header] [raw tensor bytes]

The JSON gives every tensor's dtype, shape and byte range, so the header tells what a 1.75 GB file
holds without reading it; a tensor asked for is mapped from disk (mmap), in its stored dtype, once
the file is known to be the one opened (a mapped file that shrinks is a bus error).
"""
import contextlib
import dataclasses
import difflib
import math
import mmap
import operator
import os
from collections.abc import Mapping
from pathlib import Path

import torch

from qwen.files import kind_of, open_file, parse_json, weight_files
from qwen.lang import QwenError

DTYPES = {                             # safetensors name -> (torch dtype name, bytes per element)
    "BF16": ("bfloat16", 2), "F16": ("float16", 2), "F32": ("float32", 4), "F64": ("float64", 8), "I64": ("int64", 8),
    "I32": ("int32", 4), "I16": ("int16", 2), "I8": ("int8", 1), "U8": ("uint8", 1), "BOOL": ("bool", 1)}
FLOAT_DTYPES = ("BF16", "F16", "F32", "F64")


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lives: everything but its values."""
    name: str                          # full name as stored, e.g. model.language_model.norm.weight
    dtype: str                         # safetensors name: BF16, F32, ...
    shape: tuple
    file: Path
    offset: int                        # absolute byte offset of the first element in the file
    nbytes: int
    numel = property(lambda self: math.prod(self.shape))
    torch_dtype = property(lambda self: getattr(torch, DTYPES[self.dtype][0]))


def read_header(file):
    """Parse one .safetensors header: ({name: TensorInfo}, metadata or None). Reads no tensor data."""
    with open_file(file := Path(file)) as f:
        size = os.fstat(f.fileno()).st_size
        n = int.from_bytes(f.read(8), "little")                  # header length, little-endian u64
        if 8 + n > size:
            raise _broken(file, f"its header claims {n:,} bytes but the file has only {size:,}",
                          f"文件头声称有 {n:,} 字节，但整个文件只有 {size:,} 字节")
        header = parse_json(f.read(n), file)                     # {name: {dtype, shape, data_offsets}}
    metadata = header.pop("__metadata__", None)
    infos = {}
    for name, entry in header.items():
        (begin, end), shape = entry["data_offsets"], tuple(entry["shape"])
        infos[name] = TensorInfo(name, entry["dtype"], shape, file, 8 + n + begin, end - begin)
        check_entry(infos[name], size)
    return infos, metadata


def check_entry(info, size):
    """What the loader cannot read: an unknown dtype, bytes past the file's end, bytes that do not fill the shape."""
    if info.dtype not in DTYPES:
        raise QwenError("{file}: {name} has the unsupported dtype {dtype}; this course reads {known}. Use a "
                        "checkpoint stored in one of them (Qwen3.5's is BF16).", "{file}：{name} 的数据类型 {dtype} "
                        "不受支持；本课程能读 {known}。请使用以这些类型存储的检查点（Qwen3.5 用的是 BF16）。",
                        file=info.file, name=info.name, dtype=info.dtype, known=", ".join(DTYPES))
    if (end := info.offset + info.nbytes) > size:
        raise _broken(info.file, f"{info.name} ends at byte {end:,} but the file holds only {size:,}: it is truncated "
                      f"(an interrupted download?)", f"{info.name} 的数据应到第 {end:,} 字节，但文件只有 {size:,} 字节："
                      f"文件被截断了（下载中断？）")
    if info.nbytes != (need := info.numel * DTYPES[info.dtype][1]):
        raise _broken(info.file, f"{info.name} has {info.nbytes:,} bytes, but {info.dtype} {list(info.shape)} needs "
                      f"{need:,}", f"{info.name} 有 {info.nbytes:,} 字节，但 {info.dtype} {list(info.shape)} 需要 {need:,} 字节")


def _broken(file, en, zh):
    return QwenError("{file} is not a valid safetensors file: {why}. Delete it and download again.",
                     "{file} 不是有效的 safetensors 文件：{why_zh}。请删除后重新下载。", file=file, why=en, why_zh=zh)


LM_PREFIXES = ("model.language_model.", "model.")  # multimodal layout, text-only layout
HIDDEN_PREFIXES = ("model.visual.", "mtp.")         # kept out of the default view


def short_name(full):
    """model.language_model.layers.0.x -> layers.0.x (lm_head.weight stays); None for vision and mtp tensors."""
    prefix = next((p for p in LM_PREFIXES if full.startswith(p)), "")
    return None if full.startswith(HIDDEN_PREFIXES) else full[len(prefix):]


class UnknownTensor(QwenError, KeyError):
    """W[name] with a name the checkpoint does not have."""


class Weights(Mapping):
    """{short name: tensor} for the language model (W["norm.weight"] is W["model.language_model.norm.weight"]),
    read only when asked for; vision and mtp tensors are read by their full names (W.all_names)."""

    def __init__(self, infos, folder, identities=None):
        self.folder = Path(folder)
        self._infos = infos                                      # full name -> TensorInfo
        self._short = {s: f for f in infos if (s := short_name(f)) is not None}
        self._identities = identities or {}                      # file -> (device, inode, size, mtime) at opening
        self._maps = {}                                          # file -> (file descriptor, mmap), on first use
        self.finite = set()                                      # full names checked for NaN and inf

    def __getitem__(self, name):
        info = self.info(name)
        if info.numel == 0:
            return torch.empty(info.shape, dtype=info.torch_dtype)
        flat = torch.frombuffer(self._map(info.file), dtype=info.torch_dtype, count=info.numel, offset=info.offset)
        if info.name not in self.finite and info.dtype in FLOAT_DTYPES:   # once per tensor, a block at a time
            for start in range(0, info.numel, 1 << 22):
                check_finite_block(info, flat[start:start + (1 << 22)], start)
            self.finite.add(info.name)
        return flat.view(info.shape)                             # no copy: pages load when touched

    def rows(self, name, ids):
        """Only the given rows, (len(ids), ...), by plain file reads (a map would bring in whole pages)."""
        info = self.info(name)
        ids = _row_ids(ids, name, info.shape)
        size = info.nbytes // info.shape[0] if info.shape[0] else 0
        out = torch.empty((len(ids), *info.shape[1:]), dtype=info.torch_dtype)
        raw = memoryview(out.view(-1).view(torch.uint8).numpy()) if out.numel() else memoryview(bytearray())
        with open_file(info.file) as f:
            self._check_unchanged(info.file, f.fileno())
            for k, i in enumerate(ids):
                f.seek(info.offset + i * size)
                if f.readinto(raw[k * size:(k + 1) * size]) != size:      # the file got shorter
                    raise self._changed(info.file)
        flat = out.reshape(len(ids), info.numel // max(info.shape[0], 1))
        if info.dtype in FLOAT_DTYPES and not (ok := torch.isfinite(flat).all(1)).all():   # the first bad row
            check_finite_block(info, flat[k := int((~ok).nonzero()[0, 0])], ids[k] * flat.shape[1])
        return out

    def __iter__(self):
        return iter(self._short)

    def __len__(self):
        return len(self._short)

    def __contains__(self, name):
        return name in self._short or name in self._infos

    def __repr__(self):
        return f"Weights({self.folder}, {len(self)} language-model tensors, {len(self._infos)} in all)"

    @property
    def all_names(self):                                         # as stored, vision and mtp included
        return list(self._infos)

    def info(self, name):                                        # shape, dtype, file, bytes: nothing read
        if not isinstance(name, str):
            raise QwenError("Tensor names are strings, not {v!r} ({t}).", "张量名是字符串，而不是 {v!r}（{t}）。",
                            v=name, t=type(name).__name__)
        if (full := self._short.get(name, name)) not in self._infos:
            raise self._unknown(name)
        return self._infos[full]

    def shape(self, name):
        return self.info(name).shape

    def dtype(self, name):
        return self.info(name).torch_dtype

    def names_under(self, prefix):                               # short or full, as the prefix is written
        found = [n for n in self._short if n.startswith(prefix)]
        return found + [n for n in self._infos if n.startswith(prefix) and n not in self._short]

    def _map(self, file):
        if file not in self._maps:                               # a private copy-on-write mapping:
            with open_file(file) as f:                           # writes never reach the file
                self._check_unchanged(file, f.fileno())
                self._maps[file] = os.dup(f.fileno()), mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        self._check_unchanged(file, self._maps[file][0])
        return self._maps[file][1]

    def __del__(self):
        for fd, _ in getattr(self, "_maps", {}).values():        # the mappings close themselves
            with contextlib.suppress(OSError):
                os.close(fd)

    def _check_unchanged(self, file, fd):                        # the file named and the one held: still the one opened
        if file in self._identities and not _identity(fd) == _identity(file) == self._identities[file]:
            raise self._changed(file)

    def _changed(self, file):
        return QwenError("{file}: the file changed on disk since it was opened (a new download?); run again.",
                         "{file}：文件在打开之后被改动了（重新下载了？）；请重新运行。", file=file)

    def _unknown(self, name):
        close = difflib.get_close_matches(name, list(self._short) + list(self._infos), n=3, cutoff=0.6)
        return UnknownTensor("No tensor named {name!r} in {folder}.{hint}", "{folder} 里没有名为 {name!r} 的张量。{hint_zh}",
                             name=name, folder=self.folder, hint=f" Did you mean: {', '.join(close)}?" if close else "",
                             hint_zh=f" 你是不是想写：{'、'.join(close)}？" if close else "")


def _identity(file_or_fd):
    """What tells a file apart from its replacement or its rewrite (() when it is gone)."""
    try:
        st = os.fstat(file_or_fd) if isinstance(file_or_fd, int) else os.stat(file_or_fd)
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns
    except OSError:
        return ()


def _row_ids(ids, name, shape):
    """Whole numbers (ints, numpy and torch integers, not bool) within the tensor's rows."""
    if not shape:
        raise QwenError("{name} is a single number (shape []): it has no rows. Use W[{name!r}].", "{name} 是单个数"
                        "（形状 []）：它没有行。请用 W[{name!r}]。", name=name)
    try:
        ids = [operator.index(i if not isinstance(i, bool) else None) for i in ids]
    except TypeError:                                            # 3, None, a 0-d tensor, a float
        raise QwenError("Rows of {name} are picked by a list of whole numbers, not {v!r} ({t}).", "{name} 的行要用"
                        "整数列表来选，而不是 {v!r}（{t}）。", name=name, v=ids, t=type(ids).__name__) from None
    if bad := [i for i in ids if not 0 <= i < shape[0]]:
        raise QwenError("Row {i} is outside {name} (rows 0..{top}).", "第 {i} 行超出了 {name} 的范围（行 0..{top}）。",
                        i=bad[0], name=name, top=shape[0] - 1)
    return ids


def check_finite_block(info, values, first):
    """One line naming the file and the tensor when the flat block `values` (from element `first`) holds a NaN or inf."""
    if (ok := torch.isfinite(values)).all():
        return
    index = first + int((~ok).nonzero()[0, 0])                   # the flat index, then one per dimension
    where = [int(i) for i in torch.unravel_index(torch.tensor(index), info.shape)] if info.shape else []
    raise QwenError("{file}: {name}{where} is {v}: a model's weights are finite numbers, and every result computed "
                    "from this one would be {v} too. The file is damaged; download the model again.", "{file}：{name}"
                    "{where} 是 {v}：模型权重应是有限的数，用它算出的每个结果也都会是 {v}。文件已损坏；请重新下载模型。",
                    file=info.file, name=info.name, where=where or "", v=float(values[index - first]))


def load_weights(path):
    """Open a checkpoint's weights lazily (a folder, or one .safetensors file): only headers are read now."""
    path = Path(path).expanduser()
    single = path.suffix == ".safetensors" and kind_of(path) == "file"
    files = [path] if single else weight_files(path)
    infos = {name: info for file in files for name, info in read_header(file)[0].items()}
    return Weights(infos, path.parent if single else path, {file: _identity(file) for file in files})


def load(module, W, prefix=""):
    """Fill `module` from W under `prefix`, strictly, and return it; tensors keep their stored dtype."""
    if prefix and not prefix.endswith("."):
        prefix += "."
    wanted, state = module.state_dict(), {}
    for name, current in wanted.items():
        if (key := prefix + name) not in W:
            raise W._unknown(key)
        if tuple(current.shape) != W.shape(key):
            raise QwenError("Shape mismatch for {key}: the module expects {want}, the checkpoint has {got}. Check "
                            "the config numbers used to build the module.", "{key} 的形状不匹配：模块需要 {want}，检查点"
                            "里是 {got}。请检查构建模块时用的配置数值。", key=key, want=list(current.shape), got=list(W.shape(key)))
        state[name] = W[key]
    if unexpected := [k for k in W.names_under(prefix) if k[len(prefix):] not in wanted]:
        raise QwenError("Unexpected key {key} under {prefix!r}: {module} has no parameter {name!r}.",
                        "{prefix!r} 下多出了键 {key}：{module} 没有参数 {name!r}。", key=unexpected[0], prefix=prefix,
                        module=type(module).__name__, name=unexpected[0][len(prefix):])
    module.load_state_dict(state, strict=True, assign=True)      # assign: keep the stored tensors
    return module
