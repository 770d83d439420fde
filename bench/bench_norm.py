"""Chapter 3 benchmark: ch03 on a full-size checkpoint, and RMSNorm's forward speed.

    python bench/bench_norm.py [--keep DIR]

Targets: ch03 wall <= 2x `import torch` alone; ch03 peak RSS <= 400 MB;
qwen.norm.RMSNorm forward on (8, 2048, 1024) fp32 within 1.2x of F.rms_norm (same weights,
timed interleaved in one process, best of 15).
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
import json, time, torch, torch.nn.functional as F
from qwen.norm import RMSNorm
torch.manual_seed(0)
x = torch.randn(8, 2048, 1024)
norm = RMSNorm(1024)
norm.weight.data = torch.randn(1024) * 0.1
ln = torch.nn.LayerNorm(1024)
fns = {"F.rms_norm": lambda: F.rms_norm(x, (1024,), weight=1 + norm.weight.float(), eps=1e-6),
       "RMSNorm": lambda: norm(x), "nn.LayerNorm": lambda: ln(x)}
best = {k: float("inf") for k in fns}
with torch.no_grad():
    for _ in range(15):                        # interleaved, so drift hits all three alike
        for k, f in fns.items():
            t = time.perf_counter(); f(); best[k] = min(best[k], time.perf_counter() - t)
print(json.dumps(best))
"""

folder = full_checkpoint(args.keep)
try:
    measure(python("import torch"), 2)                              # warm the page cache first
    rows = {
        "python -c 'import torch'": measure(python("import torch"), args.repeat),
        "python ch03_norm.py --model FULL": measure([sys.executable, str(ROOT / "ch03_norm.py"), "--model",
                                                     str(folder)], args.repeat),
    }
    speed = json.loads(subprocess.run([sys.executable, "-c", SPEED], cwd=ROOT, env=ENV, check=True,
                                      capture_output=True, text=True).stdout)
    print("\nforward on (8, 2048, 1024) fp32, best of 15:")
    for name, secs in speed.items():
        print(f"  {name:<14} {secs * 1e3:8.2f} ms   {secs / speed['F.rms_norm']:.2f}x F.rms_norm")
    (torch_wall, _), (wall, rss) = rows["python -c 'import torch'"], rows["python ch03_norm.py --model FULL"]
    ok = report(rows, [
        ("ch03 wall / import torch wall (x)", wall / torch_wall, 2.0),
        ("ch03 peak RSS (MB)", rss, 400),
        ("RMSNorm forward / F.rms_norm forward (x)", speed["RMSNorm"] / speed["F.rms_norm"], 1.2),
    ])
    sys.exit(0 if ok else 1)
finally:
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
