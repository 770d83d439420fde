"""Foundation benchmark: chapter 1 and the lazy loader on a full-size (1.75 GB) checkpoint.

    python bench/bench_foundation.py [--keep DIR]

Targets: ch01 wall <= 1.5x `import torch` alone; ch01 peak RSS <= 350 MB;
reading all 49 RMSNorm weights adds <= 20 MB over opening the checkpoint. Eager reading of every
tensor is printed for contrast.
"""
import argparse
import shutil
import sys

from common import ROOT, full_checkpoint, measure, python, report

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--keep", help="write (or reuse) the full-size checkpoint here instead of a temp folder")
p.add_argument("--repeat", type=int, default=3)
args = p.parse_args()

folder = full_checkpoint(args.keep)
try:
    m = str(folder)
    norms = ("[n for n in W if n.endswith(('input_layernorm.weight', 'post_attention_layernorm.weight'))"
             " or n == 'norm.weight']")
    measure(python("import torch"), 2)                              # warm the page cache first
    rows = {
        "python -c 'import torch'": measure(python("import torch"), args.repeat),
        "python ch01_weights.py --model FULL": measure([sys.executable, str(ROOT / "ch01_weights.py"),
                                                        "--model", m], args.repeat),
        "import torch + open the checkpoint (headers only)": measure(python(
            f"import torch; from qwen.weights import load_weights; W = load_weights({m!r})"), args.repeat),
        "import torch + open + read the 49 RMSNorm weights": measure(python(
            f"import torch; from qwen.weights import load_weights; W = load_weights({m!r}); ns = {norms}; "
            "assert len(ns) == 49; [W[n].float().sum() for n in ns]"), args.repeat),
        "eager: read every tensor into memory": measure(python(
            f"from qwen.weights import load_weights; W = load_weights({m!r}); "
            "d = {n: W[n].clone() for n in W.all_names}"), 1),
    }
    torch_wall, torch_rss = rows["python -c 'import torch'"]
    ch01_wall, ch01_rss = rows["python ch01_weights.py --model FULL"]
    opened = rows["import torch + open the checkpoint (headers only)"][1]
    with_norms = rows["import torch + open + read the 49 RMSNorm weights"][1]
    ok = report(rows, [
        ("ch01 wall / import torch wall (x)", ch01_wall / torch_wall, 1.5),
        ("ch01 peak RSS (MB)", ch01_rss, 350),
        ("reading the 49 norms adds (MB of peak RSS)", with_norms - opened, 20),
    ])
    sys.exit(0 if ok else 1)
finally:
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
