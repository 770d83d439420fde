"""Chapters 10-11 benchmark: how long `python ch10_vision.py --tiny` takes against `import torch`.

    python bench/bench_vision_chapters.py [--rounds 5] [--full] [--keep DIR]

Target: ch10_vision.py --tiny within 3x `python -c "import torch"`. The two commands
alternate, each in a fresh process, `--rounds` times; the best of each counts (the load of a
shared machine only ever adds time). With --full, chapter 10 also runs once on a full-size
checkpoint (the real 0.8B inventory, random values, bench/common.py: 1.75 GB written to a temp
folder unless --keep), for its wall time and peak memory: the chapter loads the tower alone.
The machine's load average is printed with the figures.
"""
import argparse
import os
import shutil
import sys

from common import ROOT, full_checkpoint, measure, python, report

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--rounds", type=int, default=5)
p.add_argument("--full", action="store_true", help="also run chapter 10 on a full-size checkpoint")
p.add_argument("--keep", help="write (or reuse) the full-size checkpoint here instead of a temp folder")
args = p.parse_args()

ch10 = [sys.executable, str(ROOT / "ch10_vision.py"), "--tiny"]
measure(ch10, 1)                                                    # builds the tiny checkpoint once, warms the cache
measure(python("import torch"), 1)
best = {"python -c 'import torch'": (float("inf"), 0.0), "python ch10_vision.py --tiny": (float("inf"), 0.0)}
for _ in range(args.rounds):                                        # alternated: both see the same load
    for name, argv in (("python -c 'import torch'", python("import torch")), ("python ch10_vision.py --tiny", ch10)):
        wall, rss = measure(argv, 1)
        best[name] = (min(best[name][0], wall), max(best[name][1], rss))
rows = dict(best)
folder = None
if args.full:
    folder = full_checkpoint(args.keep)
    rows["python ch10_vision.py --model FULL"] = measure([sys.executable, str(ROOT / "ch10_vision.py"),
                                                          "--model", str(folder)], 1)
print(f"load average (1, 5, 15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
ok = report(rows, [("ch10 --tiny wall / import torch wall (x), best of each",
                    rows["python ch10_vision.py --tiny"][0] / rows["python -c 'import torch'"][0], 3.0)])
if folder is not None and not args.keep:
    shutil.rmtree(folder, ignore_errors=True)
sys.exit(0 if ok else 1)
