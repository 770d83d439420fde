"""Plain data between the judge and the sandbox: never pickle.

A message is one frame: 8 bytes of total length, 4 bytes of JSON length, the JSON, then the raw
bytes of every tensor in it. Values are JSON numbers, strings, booleans and null, and tagged
objects: {"L": [...]} list, {"U": [...]} tuple, {"D": [[key, value], ...]} dict,
{"T": i, "dtype", "shape"} tensor i's bytes (inputs also carry "stride" and "core", so a
non-contiguous or expanded input arrives with the same layout).

The judge decodes what the sandbox sends into fresh built-in objects and plain tensors:
whatever the learner's code defines or patches, only data crosses.
"""
import dataclasses
import json
import os
import struct
import types

DTYPES = ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool")
MAX_FRAME = 1 << 30                                   # 1 GiB: frames larger than that are refused
MAX_RESULT = 256 << 20                                # what one result may weigh (the largest expected is a few MB)
MAX_TOTAL = 512 << 20                                 # what one grading's results may weigh together
MAX_HEADER = 1 << 20                                  # a result's JSON: numbers and nesting (tensors travel as bytes)
MAX_ITEMS = 100_000                                   # lists, tuples and dicts in one result's JSON
MAX_DEPTH = 40


class Unsupported(Exception):
    """A value that cannot be sent as plain data; the message says what it was (one line)."""


def _tensor_type():
    import torch
    return torch.Tensor


MAX_INT_BITS = 13_000                    # about 3,900 decimal digits, under Python's 4,300-digit str() limit


def encode(value, keep_layout=False, limit=MAX_FRAME):
    """value -> (json-able structure, [bytes]). Raises Unsupported for anything else, or for tensors
    of more than `limit` bytes together (checked before any is copied)."""
    blobs = _Blobs(limit)
    return _enc(value, blobs, keep_layout, 0), list(blobs)


class _Blobs(list):
    """The tensors' bytes, refusing to grow past a limit."""

    def __init__(self, limit):
        super().__init__()
        self.limit, self.size = limit, 0

    def reserve(self, numel, nbytes):
        from qwen.lang import T
        self.size += nbytes
        if self.size > self.limit:
            raise Unsupported(T("a tensor of {n} values ({mb:,.0f} MB): too large to send back (at most {m:.0f} MB in all)",
                                "含 {n} 个数值的张量（{mb:,.0f} MB）：太大，无法传回（总共最多 {m:.0f} MB）",
                                n=numel, mb=nbytes / 2**20, m=self.limit / 2**20))


def _enc(v, blobs, keep_layout, depth):
    from qwen.lang import T
    if depth > MAX_DEPTH:
        raise Unsupported(T("a value nested more than {n} levels deep", "嵌套超过 {n} 层的值", n=MAX_DEPTH))
    if v is None or type(v) in (bool, str):
        return v
    if isinstance(v, bool):
        return bool(v)
    if isinstance(v, int):
        n = int.__int__(v)                                      # the number itself, whatever the subclass says
        if n.bit_length() > MAX_INT_BITS:                       # json.dumps would raise past 4,300 digits
            raise Unsupported(T("an integer of about {d:,} digits: too large to send back (at most about 3,900)",
                                "约 {d:,} 位的整数：太大，无法传回（最多约 3,900 位）", d=int(n.bit_length() * 0.30103)))
        return n
    if isinstance(v, float):
        return float.__float__(v)
    if isinstance(v, str):
        return str.__str__(v)
    Tensor = _tensor_type()
    if isinstance(v, Tensor):
        return _enc_tensor(v, blobs, keep_layout)
    if isinstance(v, (list, tuple)):
        items = [_enc(x, blobs, keep_layout, depth + 1) for x in (list.__iter__(v) if isinstance(v, list) else tuple.__iter__(v))]
        return {"L": items} if isinstance(v, list) else {"U": items}
    if isinstance(v, dict):
        return {"D": [[_enc(k, blobs, keep_layout, depth + 1), _enc(x, blobs, keep_layout, depth + 1)]
                      for k, x in dict.items(v)]}
    if type(v) is types.SimpleNamespace:
        return {"N": [[k, _enc(x, blobs, keep_layout, depth + 1)] for k, x in vars(v).items()]}
    if keep_layout and dataclasses.is_dataclass(v) and not isinstance(v, type) and type(v).__module__.startswith("qwen."):
        cls = type(v)                                           # judge -> sandbox only: the library's own config objects
        return {"C": f"{cls.__module__}:{cls.__qualname__}",
                "F": [[f.name, _enc(getattr(v, f.name), blobs, keep_layout, depth + 1)] for f in dataclasses.fields(v)]}
    module = type(v).__module__ or ""
    if module == "numpy" and getattr(v, "shape", None) == ():   # (np.float64 is a float and was read above)
        raise Unsupported(T("a numpy {t}: return a Python number (int(x), float(x)) or a torch tensor",
                            "numpy 的 {t}：请返回 Python 数字（int(x)、float(x)）或 torch 张量", t=_type_name(v)))
    if module == "numpy":
        raise Unsupported(T("a numpy array: return a torch tensor (torch.from_numpy)",
                            "numpy 数组：请返回 torch 张量（torch.from_numpy）"))
    raise Unsupported(T("a value of type {t}, which the judge cannot read: return tensors, numbers, strings, lists or dicts",
                        "{t} 类型的值，评测器读不了：请返回张量、数字、字符串、列表或字典", t=_type_name(v)))


def _type_name(v):
    try:
        name = type.__dict__["__name__"].__get__(type(v))
        return str.__str__(name) if isinstance(name, str) else "object"
    except Exception:                                           # noqa: BLE001
        return "object"


def _enc_tensor(t, blobs, keep_layout):
    import torch
    from qwen.lang import T
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
    blobs.reserve(t.numel(), t.numel() * t.element_size())      # before anything is copied (an expand is cheap)
    t = t.detach().cpu().resolve_conj().resolve_neg()            # a Parameter's detach() is a plain tensor; lazy views made real
    entry = {"T": len(blobs), "dtype": dtype, "shape": list(t.shape)}
    if keep_layout and not t.is_contiguous() and t.numel():
        stride = list(t.stride())
        index = tuple(slice(0, 1) if s == 0 else slice(None) for s in stride)
        core = t[index]                                          # expanded dims kept at size 1
        entry.update(stride=stride, core=list(core.shape))
        t = core
    blobs.append(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return entry


def decode(obj, blobs, depth=0, trusted=False):
    """A structure from `encode` -> fresh built-in values, SimpleNamespaces and plain tensors. Raises
    ValueError on anything malformed. trusted (the sandbox reading the judge's inputs): qwen's own
    dataclasses are rebuilt too; the judge never rebuilds a class from what the sandbox sent."""
    if depth > MAX_DEPTH + 2:
        raise ValueError("nested too deeply")
    if obj is None or type(obj) in (bool, int, float, str):
        return obj
    if type(obj) is not dict or len(obj) == 0:
        raise ValueError(f"unexpected {type(obj).__name__}")
    if "L" in obj and len(obj) == 1 and type(obj["L"]) is list:
        return [decode(x, blobs, depth + 1, trusted) for x in obj["L"]]
    if "U" in obj and len(obj) == 1 and type(obj["U"]) is list:
        return tuple(decode(x, blobs, depth + 1, trusted) for x in obj["U"])
    if "D" in obj and len(obj) == 1 and type(obj["D"]) is list:
        out = {}
        for pair in obj["D"]:
            if type(pair) is not list or len(pair) != 2:
                raise ValueError("bad dict entry")
            key = decode(pair[0], blobs, depth + 1, trusted)
            if not isinstance(key, (str, int, float, bool, tuple, type(None))):
                raise ValueError("unhashable key")
            out[key] = decode(pair[1], blobs, depth + 1, trusted)
        return out
    if "N" in obj and len(obj) == 1 and type(obj["N"]) is list:
        if not all(type(p) is list and len(p) == 2 and type(p[0]) is str for p in obj["N"]):
            raise ValueError("bad namespace")
        return types.SimpleNamespace(**{k: decode(v, blobs, depth + 1, trusted) for k, v in obj["N"]})
    if trusted and "C" in obj and type(obj["C"]) is str and obj["C"].startswith("qwen."):
        import importlib
        module, _, name = obj["C"].partition(":")
        cls = getattr(importlib.import_module(module), name)
        return cls(**{k: decode(v, blobs, depth + 1, trusted) for k, v in obj["F"]})
    if "T" in obj:
        if not trusted and ("stride" in obj or "core" in obj):
            raise ValueError("a layout is only sent to the sandbox")
        try:
            return _dec_tensor(obj, blobs)
        except (RuntimeError, TypeError, OverflowError) as e:   # sizes torch cannot represent
            raise ValueError(f"bad tensor entry ({type(e).__name__})") from None
    raise ValueError("unknown tag")


def _dec_tensor(obj, blobs):
    import torch
    i, dtype, shape = obj.get("T"), obj.get("dtype"), obj.get("shape")
    if type(i) is not int or not 0 <= i < len(blobs) or dtype not in DTYPES or type(shape) is not list \
            or not all(type(n) is int and n >= 0 for n in shape):
        raise ValueError("bad tensor entry")
    dt = getattr(torch, dtype)
    core = obj.get("core", shape)
    if type(core) is not list or len(core) != len(shape) or not all(type(n) is int and n >= 0 for n in core):
        raise ValueError("bad tensor layout")
    size = 1
    for n in core:
        size *= n
    raw = blobs[i]
    item = torch.empty((), dtype=dt).element_size()
    if len(raw) != size * item:
        raise ValueError("tensor bytes do not match its shape")
    flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dt) if raw else torch.empty(0, dtype=dt)
    values = flat.reshape(core)
    if "stride" not in obj:
        return values.clone()
    stride = obj["stride"]
    if type(stride) is not list or len(stride) != len(shape) or not all(type(s) is int and s >= 0 for s in stride):
        raise ValueError("bad stride")
    extent = 1 + sum((n - 1) * s for n, s in zip(core, stride))
    buf = torch.empty(extent, dtype=dt)
    buf.as_strided(core, stride).copy_(values)
    return buf.as_strided(shape, stride)


def digests(args, cache=None):
    """One fingerprint per argument, of everything in it (at any depth): tensors with dtype and shape,
    and the plain values and containers around them, each with its type and length. The sandbox sends
    these after each call, the judge computes them on its own copy and compares (so "modified its input
    in place" is decided in the judge, whatever the sandbox patched). Digests, not the bytes: an input
    can be the whole embedding table. A list of ints changed in place (exercise 250's drafts: appended
    to, or an item replaced) changes its digest as a tensor would."""
    import hashlib
    out = []

    def walk(v, h, depth=0):
        if depth > MAX_DEPTH:
            return
        kind = type(v)
        if isinstance(v, _tensor_type()):
            t = v.detach().cpu()
            h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
            if t.numel():
                h.update(t.contiguous().reshape(-1).view(__import__("torch").uint8).numpy().data)
        elif v is None or kind in (bool, int, float):                 # exact types: what the wire decodes to
            h.update(f"{kind.__name__}:{float.hex(v) if kind is float else hex(v) if kind is int else v}|".encode())
        elif kind is str:
            h.update(f"str{len(v)}:".encode() + v.encode("utf-8", "surrogatepass"))
        elif kind in (list, tuple):
            h.update(f"{kind.__name__}{len(v)}[".encode())
            for x in v:
                walk(x, h, depth + 1)
            h.update(b"]")
        elif kind is dict:
            h.update(f"dict{len(v)}{{".encode())
            for key, x in dict.items(v):
                walk(key, h, depth + 1)
                walk(x, h, depth + 1)
            h.update(b"}")
        elif kind is types.SimpleNamespace:
            h.update(f"ns{len(vars(v))}{{".encode())
            for key, x in vars(v).items():
                walk(key, h, depth + 1)
                walk(x, h, depth + 1)
            h.update(b"}")
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):   # the library's config objects
            h.update(f"dc:{kind.__qualname__}{{".encode())
            for f in dataclasses.fields(v):
                walk(f.name, h, depth + 1)
                walk(getattr(v, f.name), h, depth + 1)
            h.update(b"}")
        else:                                                          # anything else: its type only
            h.update(f"?{_type_name(v)}|".encode())

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


def pack(header, blobs):
    """One frame: the header (a dict) as JSON plus the tensor bytes."""
    head = json.dumps({**header, "blobs": [len(b) for b in blobs]}, ensure_ascii=True, allow_nan=True).encode()
    body = b"".join(blobs)
    return struct.pack("<QI", 4 + len(head) + len(body), len(head)) + head + body


def check_size(frame):
    """Raise Unsupported for a packed result the judge would refuse (MAX_RESULT bytes, or a header over
    MAX_HEADER bytes or MAX_ITEMS containers): the sandbox says so in words instead of sending it."""
    from qwen.lang import T
    total, hlen = struct.unpack_from("<QI", frame)
    if len(frame) > MAX_RESULT:
        raise Unsupported(T("{mb:,.0f} MB of data: too large to send back (at most {m:.0f} MB)",
                            "{mb:,.0f} MB 的数据：太大，无法传回（最多 {m:.0f} MB）", mb=len(frame) / 2**20, m=MAX_RESULT / 2**20))
    head = frame[12:12 + hlen]
    if hlen > MAX_HEADER or _containers(head) > MAX_ITEMS:
        raise Unsupported(T("a structure of {n:,} values: too large to send back (return a tensor instead)",
                            "含 {n:,} 个值的结构：太大，无法传回（请返回张量）", n=head.count(b",") + 1))


def _containers(head):
    """An upper bound of the lists, tuples and dicts a JSON header decodes to (its '{' and '[' bytes)."""
    return head.count(b"{") + head.count(b"[")


def parse(frame, max_header=None):
    """(header, blobs) from one whole frame (its 8-byte length first). ValueError on anything malformed;
    with max_header, also on a header over that many bytes or MAX_ITEMS containers, refused before it is
    decoded (a 27 MB header of empty lists decodes to about a gigabyte)."""
    if len(frame) < 12:
        raise ValueError("frame too short")
    total, hlen = struct.unpack_from("<QI", frame)
    if total != len(frame) - 8 or total < 4 or hlen > total - 4:
        raise ValueError("frame malformed")
    head = frame[12:12 + hlen]
    if max_header is not None and (hlen > max_header or _containers(head) > MAX_ITEMS):
        raise ValueError("frame header too large")
    try:
        header = json.loads(head.decode("ascii"))
    except RecursionError:                                   # nested deeper than the parser goes
        raise ValueError("frame header nested too deeply") from None
    except UnicodeDecodeError:
        raise ValueError("frame header not ASCII") from None
    if type(header) is not dict or type(header.get("blobs")) is not list:
        raise ValueError("bad frame header")
    blobs, pos = [], 12 + hlen
    for n in header["blobs"]:
        if type(n) is not int or n < 0 or pos + n > len(frame):
            raise ValueError("bad blob sizes")
        blobs.append(frame[pos:pos + n])
        pos += n
    return header, blobs


class Reader:
    """Feeds bytes in, gives back whole frames; ValueError on a frame over max_frame or malformed."""

    def __init__(self, max_frame=MAX_FRAME, max_header=None):
        self.buf = bytearray()
        self.max_frame, self.max_header = max_frame, max_header

    def raw_frames(self, data):
        """The whole frames `data` completes, as bytes (not decoded). A frame or header over the limits is
        refused as soon as its first 12 bytes are here, before the rest is kept."""
        self.buf += data
        frames = []
        while len(self.buf) >= 12:
            total, hlen = struct.unpack_from("<QI", self.buf)
            if total > self.max_frame or total < 4 or hlen > total - 4 or (self.max_header and hlen > self.max_header):
                raise ValueError("frame too large or malformed")
            if len(self.buf) < 8 + total:
                break
            frames.append(bytes(self.buf[:8 + total]))
            del self.buf[:8 + total]
        return frames

    def feed(self, data):
        """The whole frames `data` completes, decoded: [(header, blobs)]."""
        return [parse(f) for f in self.raw_frames(data)]


def write_all(fd, data):
    """Every byte of `data` to a blocking file descriptor."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd, n):
    parts, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the other end went away")
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def read_frame(fd, max_frame=MAX_FRAME):
    """One whole frame from a blocking file descriptor, reading no byte past it: (header, blobs). EOFError
    at the end, ValueError on a malformed one."""
    head = _read_exact(fd, 12)
    total, hlen = struct.unpack_from("<QI", head)
    if total > max_frame or total < 4 or hlen > total - 4:
        raise ValueError("frame too large or malformed")
    return parse(head + _read_exact(fd, total - 4))
