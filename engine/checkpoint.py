"""The checks of a checkpoint folder that the lesson's loader leaves out: every way a damaged or
hostile folder can be wrong, said in one line naming the file, before qwen.weights reads it.

qwen/weights.py reads what a well-formed checkpoint says and refuses what it cannot read (an
unknown dtype, a tensor past the end of its file, a shape its bytes do not fill). The chapters,
chat and the judge open a checkpoint through `open_weights`, which first checks, in the order
the files are read: the index (a weight_map of file names inside the folder, every shard there),
pickle-only folders, each header (its length within limits before it is read, UTF-8 JSON, every
entry well-formed, no two tensors sharing bytes), tensors stored twice or where the index does
not say, and the config's shapes and float dtypes against the tensors' (language model and tower).

    W = open_weights(path)        # check_checkpoint(path), then qwen.weights.load_weights(path)
"""
import json
import math
from pathlib import Path

from engine.shapes import language_model_shapes, vision_shapes
from qwen.config import Config, VisionConfig
from qwen.files import INDEX_NAME, kind_of, list_folder, missing_path, open_file, read_json
from qwen.lang import QwenError
from qwen.weights import DTYPES, FLOAT_DTYPES, load_weights, short_name

MAX_HEADER_BYTES = 100_000_000         # as the safetensors library: the real header is ~40 KB
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")


def open_weights(path):
    """qwen.weights.load_weights(path), after check_checkpoint(path)."""
    check_checkpoint(path)
    return load_weights(path)


def check_checkpoint(path):
    """Every file of the checkpoint at `path` (a folder, or one .safetensors file), before it is read."""
    path = Path(path).expanduser()
    kind = kind_of(path)
    if kind is None:
        raise missing_path(path)
    if kind == "file":
        if path.suffix != ".safetensors":
            raise QwenError("{path} is a file; give the folder that holds it (the folder with config.json "
                            "and the .safetensors files), or a .safetensors file.",
                            "{path} 是一个文件；请给出它所在的文件夹（包含 config.json 和 .safetensors 文件的"
                            "文件夹），或一个 .safetensors 文件。", path=path)
        check_header(path)
        return
    files, weight_map = check_files(path)
    infos = {}
    for file in files:
        for name, (dtype, shape) in check_header(file).items():
            if name in infos:
                raise QwenError("The tensor {name} is stored twice: in {a} and in {b}.",
                                "张量 {name} 被存了两次：{a} 和 {b}。", name=name, a=infos[name][2].name, b=file.name)
            infos[name] = dtype, shape, file
    for name, file in (weight_map or {}).items():
        if name not in infos or infos[name][2].name != file:
            raise QwenError("{index} says {name} is in {file}, but that file's header does not list it.",
                            "{index} 说 {name} 在 {file} 里，但该文件的文件头里没有它。",
                            index=INDEX_NAME, name=name, file=file)
    if kind_of(path / "config.json") == "file":
        check_config(Config.load(path), infos)


# ---------------------------------------------------------------------------- the folder and its index

def check_files(folder):
    """The .safetensors files of a checkpoint folder (as qwen.files.weight_files finds them) and the
    index's weight_map, with every way they can be missing or wrong said in one line."""
    folder = Path(folder)
    index = folder / INDEX_NAME
    if kind_of(index) == "file":
        weight_map = _check_index(index, read_json(index))
        names = sorted(set(weight_map.values()))
        for name in names:
            if kind_of(folder / name) is None:
                raise QwenError("{index} lists the shard {name}, but {folder} has no such file. "
                                "The download is incomplete: run `python main.py download` again.",
                                "{index} 列出了分片 {name}，但 {folder} 里没有这个文件。下载不完整："
                                "请再运行一次 `python main.py download`。",
                                index=index.name, name=name, folder=folder)
        return [folder / n for n in names], weight_map
    names = list_folder(folder)
    if "model.safetensors" in names:
        return [folder / "model.safetensors"], None
    shards = [folder / n for n in names if n.endswith(".safetensors")]
    if shards:
        return shards, None
    pickles = [n for n in names if n.endswith(PICKLE_SUFFIXES)]
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


def _check_index(index, body):
    weight_map = body.get("weight_map") if isinstance(body, dict) else None
    if not isinstance(weight_map, dict) or not weight_map or not all(isinstance(v, str) for v in weight_map.values()):
        raise QwenError("{file} is not a valid index: it needs a \"weight_map\" object of tensor name -> "
                        "file name (strings), not empty. Download it again.",
                        "{file} 不是有效的索引文件：需要非空的 \"weight_map\" 对象，内容是 张量名 -> 文件名"
                        "（字符串）。请重新下载。", file=index)
    outside = [v for v in weight_map.values() if Path(v).name != v or v in ("", ".", "..")]
    if outside:
        raise QwenError("{file} names the shard {name!r}, which is not a file name in the model folder. "
                        "Download the index again.",
                        "{file} 给出的分片 {name!r} 不是模型文件夹里的文件名。请重新下载索引文件。",
                        file=index, name=outside[0])
    return weight_map


# ---------------------------------------------------------------------------- one header

def check_header(file):
    """{name: (dtype, shape)} of one .safetensors header, every way it can be wrong said first."""
    file = Path(file)
    with open_file(file) as f:
        size = f.seek(0, 2)
        f.seek(0)
        head = f.read(8)
        n = int.from_bytes(head, "little")                 # header length, little-endian u64
        _check_length(file, len(head), n, size)
        raw = f.read(n)
    header = _parse_header(file, raw)
    header.pop("__metadata__", None)
    data_start, data_size = 8 + n, size - 8 - n
    found, spans = {}, []
    for name, entry in header.items():
        dtype, shape, (begin, end) = _check_entry(file, name, entry, data_size)
        found[name] = dtype, shape
        if end > begin:
            spans.append((data_start + begin, data_start + end, name))
    spans.sort()
    for (_, end_a, a), (begin_b, _, b) in zip(spans, spans[1:]):     # two names for the same bytes would make
        if begin_b < end_a:                                          # editing one silently change the other
            raise _broken(file, "{a} and {b} share bytes (their data_offsets overlap)",
                          "{a} 和 {b} 的数据重叠（data_offsets 有交叠）", a=a, b=b)
    return found


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


def _broken(file, en, zh, **fields):
    return QwenError("{file} is not a valid safetensors file: " + en + ". Delete it and download again.",
                     "{file} 不是有效的 safetensors 文件：" + zh + "。请删除后重新下载。",
                     file=file, **fields)



# ---------------------------------------------------------------------------- the config against the tensors

def check_config(cfg, infos):
    """The config's numbers against the tensors' shapes ({full name: (dtype, shape, file)}), before any
    module is built from them: a config that does not belong to these weights is caught here, not by an
    allocation of the wrong size. The weights must be floating point: integers read as weights would
    give numbers that mean nothing."""
    expected, vision = language_model_shapes(cfg), _vision_shapes(cfg, infos)
    for full, (dtype, shape, file) in infos.items():
        want = expected.get(short_name(full)) or vision.get(full)
        if want is not None and dtype not in FLOAT_DTYPES:
            raise QwenError("{file}: {name} is stored as {dtype}, but a model's weights are floating-point "
                            "numbers ({floats}; Qwen3.5's are BF16, a few F32). Download the model again.",
                            "{file}：{name} 存成了 {dtype}，但模型权重应是浮点数（{floats}；Qwen3.5 用 BF16，"
                            "少数为 F32）。请重新下载模型。", file=file, name=full, dtype=dtype,
                            floats=", ".join(FLOAT_DTYPES))
        if want is not None and tuple(want[0]) != shape:
            raise QwenError("{config} and the weights disagree: by the config, {name} has shape {want}, "
                            "but {file} stores {got}. They belong to different models; download them "
                            "together again.",
                            "{config} 和权重对不上：按配置，{name} 的形状是 {want}，但 {file} 里存的是 {got}。"
                            "它们属于不同的模型；请一起重新下载。", config=cfg.source, name=full,
                            want=list(want[0]), file=file.name, got=list(shape))


def _vision_shapes(cfg, infos):
    """{full name: (shape, dtype)} of the tower's tensors by config.json's vision_config, when the
    folder has them; {} for a text-only export, and for a vision_config that cannot be read (that is
    said when the tower is built: the text chapters never need it)."""
    if not any(name.startswith("model.visual.") for name in infos) or not isinstance(cfg.raw.get("vision_config"), dict):
        return {}
    try:
        vcfg = VisionConfig.from_config(cfg)
    except QwenError:
        return {}
    return vision_shapes(vcfg, out_hidden=cfg.hidden_size) if vcfg else {}
