"""Shared benchmark helpers: a full-size checkpoint, and timing + peak memory of whole commands.

Benchmarks are not tests: they print ratios measured side by side in one run, on this
machine, with the allocator pinned (glibc's mmap/trim thresholds) so page-fault noise does
not swing small timings. Each command runs in a fresh process, as a learner runs it.
"""
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = Path(__file__).with_name("qwen3.5-0.8b-manifest.json")
ENV = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "1048576", "MALLOC_TRIM_THRESHOLD_": "268435456",
       "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "QWEN_LANG": "en"}
# For runs that step the Gated DeltaNet recurrence (decode steps, verify passes): its state is 1 MB
# (16 x 128 x 128 fp32), exactly ENV's mmap threshold, so at 1 MB each state a step makes is a fresh
# mmap with its page faults (bench_deltanet.py: 2.84 s instead of 0.39 s at 2048 tokens; a decode step
# 227 ms instead of about 110 in bench_speculative.py). glibc's default raises its threshold by itself
# after the first large free, so 64 MB, above every temporary there, is close to a learner's process.
SPEED_ENV = {**ENV, "MALLOC_MMAP_THRESHOLD_": str(64 << 20)}


FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8")


def cpu_line():
    """The CPU's name, its cores and which of FLAGS it has: printed beside every bench's figures, so that
    figures from different machines are never read as one machine's."""
    import platform
    name, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and name in ("", platform.machine(), platform.processor()):
                name = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    except OSError:
        pass
    have = [f for f in FLAGS if f in flags]
    return f"CPU: {name}, {os.cpu_count()} cores; flags: {', '.join(have) if have else 'none of ' + ', '.join(FLAGS)}"


class Pressure:
    """How much of a stretch of time some task on this machine waited for a core (Linux's
    /proc/pressure/cpu, "some"): near 0 on a quiet machine, where a benchmark's ratios mean what they
    say. `share()` is None where the kernel does not report it (macOS, old kernels)."""
    FILE = Path("/proc/pressure/cpu")

    def __init__(self):
        self.start = self._now()

    def _now(self):
        try:
            some = self.FILE.read_text(encoding="utf-8").splitlines()[0]
            return time.monotonic(), int(some.rsplit("total=", 1)[1]) / 1e6      # seconds waited, in all
        except (OSError, IndexError, ValueError):
            return None

    def share(self):
        end = self._now()
        if self.start is None or end is None or end[0] <= self.start[0]:
            return None
        return (end[1] - self.start[1]) / (end[0] - self.start[0])

    def verdict(self, busy=0.10):
        """One line: the share, and whether the figures can be trusted."""
        share = self.share()
        if share is None:
            return "CPU pressure: not reported by this system (Linux's /proc/pressure/cpu); check the load yourself"
        if share > busy:
            return (f"CPU pressure: some task waited for a core {share:.0%} of the time. WARNING: the machine was "
                    f"busy, so the timings above are not this machine's; rerun when it is quiet")
        return f"CPU pressure: some task waited for a core {share:.0%} of the time (quiet enough: under {busy:.0%})"


def write_full_checkpoint(folder):
    """The real 0.8B inventory (488 tensors, 1.75 GB, real names, shapes, dtypes, file names),
    random values, streamed to disk tensor by tensor so it never sits in memory whole."""
    import torch

    sys.path.insert(0, str(ROOT))
    from engine.tiny import REAL_SHARD_NAME
    from qwen.weights import DTYPES
    from qwen.files import INDEX_NAME

    manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(manifest["config"], indent=4), encoding="utf-8")
    tensors = manifest["tensors"]
    # safetensors' own order: by alignment (F32 before BF16), then by name
    order = sorted(tensors, key=lambda n: (-DTYPES[tensors[n]["dtype"]][1], n))
    header, offset = {}, 0
    for name in order:
        t = tensors[name]
        nbytes = DTYPES[t["dtype"]][1] * math.prod(t["shape"])
        header[name] = {"dtype": t["dtype"], "shape": t["shape"], "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-(8 + len(raw)) % 8)                              # data starts 8-byte aligned
    g = torch.Generator().manual_seed(0)
    with open(folder / REAL_SHARD_NAME, "wb") as f:
        f.write(len(raw).to_bytes(8, "little") + raw)
        for name in order:
            t = tensors[name]
            dtype = getattr(torch, DTYPES[t["dtype"]][0])
            shape = t["shape"]
            rows = max(1, (1 << 24) // math.prod(shape[1:]))
            for start in range(0, shape[0], rows):                   # 16M values at a time
                part = [min(rows, shape[0] - start)] + shape[1:]
                values = torch.randn(part, generator=g) * (0.3 if "norm" in name else 0.02)
                f.write(values.to(dtype).numpy().tobytes() if dtype != torch.bfloat16
                        else values.to(dtype).view(torch.int16).numpy().tobytes())
    index = {"metadata": {"total_size": offset}, "weight_map": {n: REAL_SHARD_NAME for n in sorted(tensors)}}
    (folder / INDEX_NAME).write_text(json.dumps(index, indent=2), encoding="utf-8")
    from engine.tiny import write_tokenizer_files
    return write_tokenizer_files(folder)                               # the real vocabulary


def full_checkpoint(keep=None):
    """A full-size checkpoint: at `keep` (reused if already there), else in a new temp folder.

    Written by a child process: this one stays small (no torch), because a child's peak RSS
    as the kernel reports it starts from its parent's size at fork."""
    folder = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="qwen-full-"))
    if not (folder / "tokenizer.json").is_file():
        print(f"writing the full-size checkpoint to {folder}" + ("" if keep else " (deleted at the end)"),
              flush=True)
        code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); " \
               f"from common import write_full_checkpoint; write_full_checkpoint({str(folder)!r})"
        subprocess.run([sys.executable, "-c", code], check=True, env=ENV)
    return folder


def measure(argv, repeat=3, env=None):
    """(median wall seconds, max peak RSS in MB) of a command, each run in a fresh process."""
    walls, peaks = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        p = subprocess.Popen(argv, cwd=ROOT, env=env or ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(p.pid, 0)
        walls.append(time.perf_counter() - start)
        if status != 0:
            raise SystemExit(f"failed: {' '.join(map(str, argv))}\n{p.stderr.read().decode()}")
        p.stderr.close()
        peaks.append(usage.ru_maxrss / 1024)                           # Linux reports KB
    return statistics.median(walls), max(peaks)


def python(code):
    return [sys.executable, "-c", code]


def report(rows, targets):
    """Print measured rows and the target checks; return True when every target holds."""
    print(f"\n{'command':<52} {'wall s':>8} {'peak RSS MB':>12}")
    for name, (wall, rss) in rows.items():
        print(f"{name:<52} {wall:>8.2f} {rss:>12.0f}")
    print()
    ok = True
    for text, value, limit in targets:
        passed = value <= limit
        ok &= passed
        print(f"{'PASS' if passed else 'FAIL'}  {text:<58} {value:>8.2f}  (target <= {limit})")
    return ok
