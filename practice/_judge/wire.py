"""Plain data between the judge and the sandbox: never pickle.

A message is one frame: 8 bytes of total length, 4 bytes of JSON length, the JSON, then the raw
bytes of every tensor in it. Values are JSON numbers, strings, booleans and null, and tagged
objects: {"L": [...]} list, {"U": [...]} tuple, {"D": [[key, value], ...]} dict, {"N": [[name,
value], ...]} SimpleNamespace, {"T": i, "dtype", "shape"} tensor i's bytes (inputs also carry
"stride" and "core", so a non-contiguous or expanded input arrives with the same layout, and
{"C": class, "F": fields} for the library's own config objects).

The judge decodes what the sandbox sends into fresh built-in objects and plain tensors:
whatever the learner's code defines or patches, only data crosses.
"""
import dataclasses
import hashlib
import json
import os
import struct
import types

from qwen.lang import T

DTYPES = ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool")
MAX_FRAME = 1 << 30                                   # 1 GiB: frames larger than that are refused
MAX_RESULT = 256 << 20                                # what one result may weigh (the largest expected is a few MB)
MAX_TOTAL = 512 << 20                                 # what one grading's results may weigh together
MAX_HEADER = 1 << 20                                  # a result's JSON: numbers and nesting (tensors travel as bytes)
MAX_ITEMS = 100_000                                   # lists, tuples and dicts in one result's JSON
MAX_DEPTH = 40
MAX_INT_BITS = 13_000                                 # about 3,900 decimal digits, under Python's 4,300-digit str() limit


class Unsupported(Exception):
    """A value that cannot be sent as plain data; the message says what it was (one line)."""


def _type_name(v):
    try:
        name = type.__dict__["__name__"].__get__(type(v))
        return str.__str__(name) if isinstance(name, str) else "object"
    except Exception:                                           # noqa: BLE001
        return "object"


# ------------------------------------------------------------------------------------------ values

def encode(value, keep_layout=False, limit=MAX_FRAME):
    """value -> (json-able structure, [bytes]). Raises Unsupported for anything else, or for tensors
    of more than `limit` bytes together (checked before any is copied). Subclasses of the built-in
    types become the plain values they hold, whatever their methods say."""
    import torch
    blobs, size = [], [0]

    def enc(v, depth):
        if depth > MAX_DEPTH:
            raise Unsupported(T("a value nested more than {n} levels deep", "嵌套超过 {n} 层的值", n=MAX_DEPTH))
        if v is None or type(v) in (bool, str):
            return v
        if isinstance(v, bool):
            return bool(v)
        if isinstance(v, int):
            n = int.__int__(v)
            if n.bit_length() > MAX_INT_BITS:                   # json.dumps would raise past 4,300 digits
                raise Unsupported(T("an integer of about {d:,} digits: too large to send back (at most about 3,900)",
                                    "约 {d:,} 位的整数：太大，无法传回（最多约 3,900 位）", d=int(n.bit_length() * 0.30103)))
            return n
        if isinstance(v, float):
            return float.__float__(v)
        if isinstance(v, str):
            return str.__str__(v)
        if isinstance(v, torch.Tensor):
            return tensor(v)
        if isinstance(v, list):
            return {"L": [enc(x, depth + 1) for x in list.__iter__(v)]}
        if isinstance(v, tuple):
            return {"U": [enc(x, depth + 1) for x in tuple.__iter__(v)]}
        if isinstance(v, dict):
            return {"D": [[enc(k, depth + 1), enc(x, depth + 1)] for k, x in dict.items(v)]}
        if type(v) is types.SimpleNamespace:
            return {"N": [[k, enc(x, depth + 1)] for k, x in vars(v).items()]}
        if keep_layout and dataclasses.is_dataclass(v) and not isinstance(v, type) and type(v).__module__.startswith("qwen."):
            return {"C": f"{type(v).__module__}:{type(v).__qualname__}",      # judge -> sandbox only
                    "F": [[f.name, enc(getattr(v, f.name), depth + 1)] for f in dataclasses.fields(v)]}
        if (type(v).__module__ or "") == "numpy":
            if getattr(v, "shape", None) == ():                 # (np.float64 is a float and was read above)
                raise Unsupported(T("a numpy {t}: return a Python number (int(x), float(x)) or a torch tensor",
                                    "numpy 的 {t}：请返回 Python 数字（int(x)、float(x)）或 torch 张量", t=_type_name(v)))
            raise Unsupported(T("a numpy array: return a torch tensor (torch.from_numpy)",
                                "numpy 数组：请返回 torch 张量（torch.from_numpy）"))
        raise Unsupported(T("a value of type {t}, which the judge cannot read: return tensors, numbers, strings, lists or dicts",
                            "{t} 类型的值，评测器读不了：请返回张量、数字、字符串、列表或字典", t=_type_name(v)))

    def tensor(t):
        if type(t) not in (torch.Tensor, torch.nn.Parameter):
            raise Unsupported(T("a tensor subclass ({t}): return a plain torch.Tensor", "张量的子类（{t}）：请返回普通的 torch.Tensor",
                                t=_type_name(t)))
        if t.is_nested:
            raise Unsupported(T("a nested tensor: return a regular (padded) one", "嵌套张量（nested tensor）：请返回普通的（补齐的）张量"))
        if t.layout != torch.strided:
            raise Unsupported(T("a sparse tensor ({l}): return a dense one (.to_dense())", "稀疏张量（{l}）：请返回稠密张量（.to_dense()）",
                                l=str(t.layout).replace("torch.", "")))
        if t.device.type == "meta":
            raise Unsupported(T("a tensor on the meta device (it has a shape but no values)", "meta 设备上的张量（只有形状，没有数值）"))
        dtype = str(t.dtype).replace("torch.", "")
        if dtype not in DTYPES:
            raise Unsupported(T("a tensor of dtype {d}, which the judge does not read", "类型为 {d} 的张量，评测器读不了", d=dtype))
        size[0] += t.numel() * t.element_size()                 # before anything is copied (an expand is cheap)
        if size[0] > limit:
            raise Unsupported(T("a tensor of {n} values ({mb:,.0f} MB): too large to send back (at most {m:.0f} MB in all)",
                                "含 {n} 个数值的张量（{mb:,.0f} MB）：太大，无法传回（总共最多 {m:.0f} MB）",
                                n=t.numel(), mb=t.numel() * t.element_size() / 2**20, m=limit / 2**20))
        t = t.detach().cpu().resolve_conj().resolve_neg()        # a Parameter's detach() is a plain tensor; lazy views made real
        entry = {"T": len(blobs), "dtype": dtype, "shape": list(t.shape)}
        if keep_layout and not t.is_contiguous() and t.numel():
            stride = list(t.stride())
            t = t[tuple(slice(0, 1) if s == 0 else slice(None) for s in stride)]   # expanded dims kept at size 1
            entry.update(stride=stride, core=list(t.shape))
        blobs.append(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        return entry

    return enc(value, 0), blobs


def _sizes(x, n=None):
    """x is a list of n (any n when None) non-negative ints."""
    return type(x) is list and (n is None or len(x) == n) and all(type(i) is int and i >= 0 for i in x)


def decode(obj, blobs, depth=0, trusted=False):
    """A structure from `encode` -> fresh built-in values, SimpleNamespaces and plain tensors. Raises
    ValueError on anything malformed. trusted (the sandbox reading the judge's inputs): qwen's own
    dataclasses are rebuilt too; the judge never rebuilds a class from what the sandbox sent."""
    if depth > MAX_DEPTH + 2:
        raise ValueError("nested too deeply")
    if obj is None or type(obj) in (bool, int, float, str):
        return obj
    if type(obj) is not dict or not obj:
        raise ValueError(f"unexpected {type(obj).__name__}")
    tag, items = next(iter(obj.items()))
    pairs = tag in ("D", "N", "F") and type(items) is list and all(type(p) is list and len(p) == 2 for p in items)
    sub = lambda x: decode(x, blobs, depth + 1, trusted)       # noqa: E731
    if len(obj) == 1 and tag in ("L", "U") and type(items) is list:
        return [sub(x) for x in items] if tag == "L" else tuple(sub(x) for x in items)
    if len(obj) == 1 and tag == "D" and pairs:
        out = {}
        for k, x in items:
            key = sub(k)
            if not isinstance(key, (str, int, float, bool, tuple, type(None))):
                raise ValueError("unhashable key")
            out[key] = sub(x)
        return out
    if len(obj) == 1 and tag == "N" and pairs and all(type(k) is str for k, _ in items):
        return types.SimpleNamespace(**{k: sub(x) for k, x in items})
    if trusted and type(obj.get("C")) is str and obj["C"].startswith("qwen."):
        import importlib
        module, _, name = obj["C"].partition(":")
        return getattr(importlib.import_module(module), name)(**{k: sub(x) for k, x in obj["F"]})
    if "T" in obj:
        if not trusted and ("stride" in obj or "core" in obj):
            raise ValueError("a layout is only sent to the sandbox")
        try:
            return _tensor(obj, blobs)
        except (RuntimeError, TypeError, OverflowError) as e:   # sizes torch cannot represent
            raise ValueError(f"bad tensor entry ({type(e).__name__})") from None
    raise ValueError("unknown tag")


def _tensor(obj, blobs):
    import torch
    i, dtype, shape = obj.get("T"), obj.get("dtype"), obj.get("shape")
    if type(i) is not int or not 0 <= i < len(blobs) or dtype not in DTYPES or not _sizes(shape):
        raise ValueError("bad tensor entry")
    dt, core = getattr(torch, dtype), obj.get("core", shape)
    if not _sizes(core, len(shape)):
        raise ValueError("bad tensor layout")
    size = 1
    for n in core:
        size *= n
    raw = blobs[i]
    if len(raw) != size * torch.empty((), dtype=dt).element_size():
        raise ValueError("tensor bytes do not match its shape")
    values = (torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dt) if raw else torch.empty(0, dtype=dt)).reshape(core)
    if "stride" not in obj:
        return values.clone()
    stride = obj["stride"]
    if not _sizes(stride, len(shape)):
        raise ValueError("bad stride")
    buf = torch.empty(1 + sum((n - 1) * s for n, s in zip(core, stride)), dtype=dt)
    buf.as_strided(core, stride).copy_(values)
    return buf.as_strided(shape, stride)


def digests(args, cache=None):
    """One fingerprint per argument, of everything in it (at any depth): tensors with dtype and shape,
    and the plain values and containers around them, each with its type and length. The sandbox sends
    these after each call, the judge computes them on its own copy and compares (so "modified its input
    in place" is decided in the judge, whatever the sandbox patched). Digests, not the bytes: an input
    can be the whole embedding table. A list of ints changed in place (exercise 250's drafts: appended
    to, or an item replaced) changes its digest as a tensor would."""
    import torch

    def walk(v, h, depth=0):
        kind = type(v)
        if depth > MAX_DEPTH:
            return
        if isinstance(v, torch.Tensor):
            t = v.detach().cpu()
            h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
            if t.numel():
                h.update(t.contiguous().reshape(-1).view(torch.uint8).numpy().data)
            return
        if v is None or kind in (bool, int, float):              # exact types: what the wire decodes to
            return h.update(f"{kind.__name__}:{float.hex(v) if kind is float else hex(v) if kind is int else v}|".encode())
        if kind is str:
            return h.update(f"str{len(v)}:".encode() + v.encode("utf-8", "surrogatepass"))
        if kind in (list, tuple):
            children = list(v)
        elif kind is dict:
            children = [x for pair in dict.items(v) for x in pair]
        elif kind is types.SimpleNamespace:
            children = [x for pair in vars(v).items() for x in pair]
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):   # the library's config objects
            children = [x for f in dataclasses.fields(v) for x in (f.name, getattr(v, f.name))]
        else:                                                    # anything else: its type only
            return h.update(f"?{_type_name(v)}|".encode())
        h.update(f"{kind.__qualname__}{len(children)}[".encode())
        for x in children:
            walk(x, h, depth + 1)
        h.update(b"]")

    out = []
    for a in args:
        if cache is not None and id(a) in cache:                 # the judge's copy: one table, several cases
            out.append(cache[id(a)][1])
            continue
        h = hashlib.sha256()
        walk(a, h)
        out.append(h.hexdigest())
        if cache is not None:
            cache[id(a)] = (a, out[-1])                          # the object kept alive, so its id stays its own
    return out


# ------------------------------------------------------------------------------------------ frames

def pack(header, blobs):
    """One frame: the header (a dict) as JSON plus the tensor bytes."""
    head = json.dumps({**header, "blobs": [len(b) for b in blobs]}, ensure_ascii=True, allow_nan=True).encode()
    body = b"".join(blobs)
    return struct.pack("<QI", 4 + len(head) + len(body), len(head)) + head + body


def _too_large(hlen, head):
    """A header over MAX_HEADER bytes, or with more than MAX_ITEMS containers (its '{' and '[' bytes):
    a 27 MB header of empty lists decodes to about a gigabyte."""
    return hlen > MAX_HEADER or head.count(b"{") + head.count(b"[") > MAX_ITEMS


def check_size(frame):
    """Raise Unsupported for a packed result the judge would refuse: the sandbox says so in words instead."""
    if len(frame) > MAX_RESULT:
        raise Unsupported(T("{mb:,.0f} MB of data: too large to send back (at most {m:.0f} MB)",
                            "{mb:,.0f} MB 的数据：太大，无法传回（最多 {m:.0f} MB）", mb=len(frame) / 2**20, m=MAX_RESULT / 2**20))
    hlen = struct.unpack_from("<QI", frame)[1]
    head = frame[12:12 + hlen]
    if _too_large(hlen, head):
        raise Unsupported(T("a structure of {n:,} values: too large to send back (return a tensor instead)",
                            "含 {n:,} 个值的结构：太大，无法传回（请返回张量）", n=head.count(b",") + 1))


def _lengths(head, max_frame, limit_header):
    """(total, header length) from a frame's first 12 bytes; ValueError when they cannot be a frame's."""
    total, hlen = struct.unpack_from("<QI", head)
    if total > max_frame or total < 4 or hlen > total - 4 or (limit_header and hlen > MAX_HEADER):
        raise ValueError("frame too large or malformed")
    return total, hlen


def parse(frame, limit_header=False):
    """(header, blobs) from one whole frame. ValueError on anything malformed; with limit_header (what
    the sandbox sent), also on a header _too_large, refused before it is decoded."""
    if len(frame) < 12:
        raise ValueError("frame too short")
    total, hlen = _lengths(frame, MAX_FRAME, False)
    head = frame[12:12 + hlen]
    if total != len(frame) - 8 or (limit_header and _too_large(hlen, head)):
        raise ValueError("frame malformed or its header too large")
    try:
        header = json.loads(head.decode("ascii"))
    except (RecursionError, UnicodeDecodeError):             # nested deeper than the parser goes; not ASCII
        raise ValueError("bad frame header") from None
    if type(header) is not dict or not _sizes(header.get("blobs")):
        raise ValueError("bad frame header")
    blobs, pos = [], 12 + hlen
    for n in header["blobs"]:
        if pos + n > len(frame):
            raise ValueError("bad blob sizes")
        blobs.append(frame[pos:pos + n])
        pos += n
    return header, blobs


class Reader:
    """Feeds bytes in, gives back whole frames; ValueError on a frame over max_frame or malformed. A frame
    or header over the limits is refused as soon as its first 12 bytes are here, before the rest is kept."""

    def __init__(self, max_frame=MAX_FRAME, limit_header=False):
        self.buf = bytearray()
        self.max_frame, self.limit_header = max_frame, limit_header

    def feed(self, data):
        """[(header, blobs)] of the whole frames `data` completes."""
        self.buf += data
        frames = []
        while len(self.buf) >= 12:
            total, _ = _lengths(self.buf, self.max_frame, self.limit_header)
            if len(self.buf) < 8 + total:
                break
            frames.append(parse(bytes(self.buf[:8 + total]), self.limit_header))
            del self.buf[:8 + total]
        return frames


def write_all(fd, data):
    """Every byte of `data` to a blocking file descriptor."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_frame(fd):
    """One whole frame from a blocking file descriptor: (header, blobs). EOFError at the end, ValueError
    on a malformed one."""
    def exactly(n):
        parts = []
        while n:
            chunk = os.read(fd, min(n, 1 << 20))
            if not chunk:
                raise EOFError("the other end went away")
            parts.append(chunk)
            n -= len(chunk)
        return b"".join(parts)
    head = exactly(12)
    total, _ = _lengths(head, MAX_FRAME, False)
    return parse(head + exactly(total - 4))
