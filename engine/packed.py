"""bf16 products from weights packed once: the engine's path for bf16 on CPUs with bf16 arithmetic.

Why: where the CPU computes in bf16 (AVX512-BF16, AMX), torch's bf16 F.linear goes to oneDNN's
matmul, which multiplies by the weight in a blocked layout of its own (pairs of inputs interleaved,
as the bf16 dot-product instructions read them). Given the weight as the model stores it, it
reorders the whole weight at every call: a decode step then reads every weight twice and writes it
once. Packed once into that layout (torch.ops.mkldnn._reorder_linear_weight), the same kernel reads
it once per call and gives the very same numbers, bit for bit (tests/test_packed.py). bench/bench_model.py's
1-row products measure both ways.

A weight is packed at its first call of at most PACK_ROWS rows (a decode step, or the prompt's last
position through the output layer), or all at once by `prepare(model)`, which a chapter calls right
after loading so that no timing it prints holds the packing (about a second for the 0.8B model). From
then on every call uses the packed copy, the prompts' too. The copy is made again when the weight
changes in place (its version counter moves: p.mul_(2), p.copy_(...) under torch.no_grad()), gets
other values under the same tensor (`p.data = t`, which `module.to(dtype)` also does: its storage
moves), or when 8 values sampled across it differ from theirs at packing: so a write through p.data
(`p.data.mul_(2)`, which torch does not count) is seen when it changes those values; `forget()` drops
every copy. An inference tensor (made inside torch.inference_mode) counts no versions: its calls are
declined (F.linear). A weight that is freed takes its copy with it.

Memory: a packed copy is as large as its weight. A bf16 model read from a bf16 checkpoint holds its
weights as the file's own pages (qwen/weights.py maps them), so once a block of rows is packed its
pages are handed back to the kernel (madvise MADV_PAGEOUT, Linux 5.4 and later: a page not written
to is dropped and read from the file again if ever touched), and the process holds about one copy
of the weights, as before. Weights are packed BLOCK values at a time (the output layer, 254 M
values, in 16 blocks), so packing holds at most one block twice. A weight in the process's own
memory (converted at load, or trained) is left as it is: packing it then costs a second copy.
"""
import ctypes
import functools
import mmap
import weakref

import torch
import torch.nn.functional as F
from torch.multiprocessing.reductions import StorageWeakRef

from engine import upcast
from qwen.mtp import MAX_DRAFTS

MADV_PAGEOUT = 21                              # Linux: reclaim these pages now (file pages: dropped, not lost)
BLOCK = 1 << 24                                # values packed at a time (32 MB of bf16)
PACK_ROWS = MAX_DRAFTS + 1                     # a call of at most this many rows (a decode step, a verify pass)
                                               # packs a weight not packed yet
_packed = {}                                   # id(weight) -> (`_stamp`, `_probe`'s places and values, blocks of rows)
_watched = set()                               # ids whose weight's end drops its copy


def available():
    """Whether the CPU has bf16 arithmetic (engine/upcast.py reads its flags) and this torch packs a bf16
    weight for oneDNN with F.linear's numbers."""
    return not upcast.emulated_bf16() and _packs()


@functools.lru_cache(maxsize=1)
def _packs():
    """Whether the packed product is F.linear's to the bit (checked once on a small product of 3 rows)."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        g = torch.Generator().manual_seed(0)
        w, x = torch.randn(64, 32, generator=g).bfloat16(), torch.randn(3, 32, generator=g).bfloat16()
        return torch.equal(_product(x, torch.ops.mkldnn._reorder_linear_weight(w, 1), None), F.linear(x, w))
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


def _product(rows, packed, bias):
    return torch.ops.mkldnn._linear_pointwise(rows, packed, bias, "none", [], "")


def takes(x, weight, bias=None):
    """Whether this call is one the packed path computes as F.linear does: bf16 x and weight on the CPU,
    a 2-D weight x fits, no bias or a bf16 one, no gradient wanted, and `available`; and the weight is
    packed already or the call has at most PACK_ROWS rows; not an inference tensor (it counts no versions)."""
    return (weight.dtype == torch.bfloat16 and x.dtype == torch.bfloat16 and weight.device.type == "cpu"
            and x.is_cpu and weight.dim() == 2 and x.dim() > 0 and x.shape[-1] == weight.shape[1]
            and x.numel() > 0 and not weight.is_inference()
            and (bias is None or (bias.dtype == torch.bfloat16 and bias.dim() == 1))
            and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad
                                                  or (bias is not None and bias.requires_grad)))
            and (id(weight) in _packed or x.numel() <= PACK_ROWS * x.shape[-1])
            and available())


def _stamp(weight):
    """What changes when the weight's values may have: its version (an in-place change), and which storage
    holds them and where (a new tensor put under the same object: `p.data = t`, `module.to(dtype)`). The
    storage by a weak reference, which no other storage shares while it is held (an address alone may be
    handed out again once the old storage is freed)."""
    return (weight._version, StorageWeakRef(weight.untyped_storage()), weight.storage_offset(),
            tuple(weight.shape), weight.stride())


def _probe(weight):
    """Where to sample 8 of the weight's values, across its rows and columns (8 pages, not the whole weight)."""
    return (torch.linspace(0, weight.shape[0] - 1, 8).long(), torch.linspace(0, weight.shape[1] - 1, 8).long())


def packed(weight):
    """The weight's packed copy, as blocks of rows [(first row, end, packed rows)], made now if there is
    none or the weight changed since (`_stamp`, or the values at `_probe`)."""
    key = id(weight)
    held = _packed.get(key)
    if held is None or held[0] != _stamp(weight) or not torch.equal(weight.detach()[held[1]], held[2]):
        step = max(1, BLOCK // max(1, weight.shape[1]))
        blocks, a_file = [], _file_backed(weight.data_ptr())                  # one weight, one mapping
        for a in range(0, weight.shape[0], step):
            part = weight.detach()[a:a + step]                                  # (step, in)
            blocks.append((a, a + part.shape[0], torch.ops.mkldnn._reorder_linear_weight(part, 1)))
            if a_file:
                _hand_back(part)
        if key not in _watched:
            _watched.add(key)
            weakref.finalize(weight, _drop, key)
        where = _probe(weight)
        held = _packed[key] = (_stamp(weight), where, weight.detach()[where], blocks)
    return held[3]


def _drop(key):
    _packed.pop(key, None)
    _watched.discard(key)


def prepare(model):
    """Pack now every weight of `model` that its decode steps would pack (its Linear layers' and its output
    layer's): returns how many were packed. Nothing where the packed path is off."""
    weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    weights += [model.output_weight] if hasattr(model, "output_weight") else []
    n = 0
    for w in weights:
        if isinstance(w, torch.Tensor) and w.dim() == 2 and takes(w.new_zeros(1, w.shape[1]), w):
            packed(w)
            n += 1
    return n


def forget():
    """Drop every packed copy (the next calls pack again)."""
    _packed.clear()


def linear(x, weight, bias=None):
    """F.linear(x, weight, bias) by the weight's packed copy: x (..., in) bf16 -> (..., out) bf16."""
    rows = x.reshape(-1, x.shape[-1]).contiguous()                              # (rows, in)
    outs = [_product(rows, p, None if bias is None else bias[a:b]) for a, b, p in packed(weight)]
    out = outs[0] if len(outs) == 1 else torch.cat(outs, -1)                    # (rows, out)
    return out.reshape(*x.shape[:-1], weight.shape[0])                          # -> (..., out)


def _file_backed(address):
    """Whether the address lies in a mapping of a file (a path in /proc/self/maps), not anonymous memory."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split(maxsplit=5)
                start, end = (int(a, 16) for a in fields[0].split("-"))
                if start <= address < end:
                    return len(fields) == 6 and fields[5].startswith("/")
    except (OSError, ValueError, IndexError):
        pass
    return False


def _hand_back(weight):
    """Give the kernel back the whole pages of a weight that lies in a file's mapping (see Memory above)."""
    start = weight.data_ptr()
    page = mmap.PAGESIZE
    first, last = -(-start // page) * page, (start + weight.nbytes) // page * page
    if last > first:
        try:
            ctypes.CDLL(None, use_errno=True).madvise(ctypes.c_void_p(first), ctypes.c_size_t(last - first),
                                                      MADV_PAGEOUT)
        except (OSError, AttributeError):
            pass
