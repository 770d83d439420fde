"""Benchmark of qwen/products.py's context: what entering fast_products costs a decode step.

generate_ids and speculative_ids make one fast_products per reply and enter it at every step. Made
anew at every step instead, it would walk all the model's modules to choose its layers each time.
Side by side in one process, alternated, best of `--rounds` (CPU ms per step: entering and leaving,
with 1 thread CPU time barely moves with the machine's load):

  made each step   `with fast_products(model):` at every step: the walk, then the patches;
  made once        `with fast:` on one made before the loop: the patches only.

On the full-size text model's module tree (the real config, weights on the meta device: no file is
written or read, and a walk reads no weight; meta weights are taken by no path, so there the
difference is the walk alone) and on the built-in tiny checkpoint (its output layer is taken).
Nothing here allocates more than a few objects, so glibc's allocator needs no pinning.

    python bench/bench_products.py [--rounds 7] [--steps 200]
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import MANIFEST  # noqa: E402


def per_step(enter, steps):
    start = time.process_time()
    for _ in range(steps):
        with enter():
            pass
    return (time.process_time() - start) / steps


def compare(name, model, rounds, steps):
    from qwen.products import fast_products
    made = fast_products(model)
    runs = {"made each step": [], "made once": []}
    for _ in range(rounds):
        runs["made each step"].append(per_step(lambda: fast_products(model), steps))
        runs["made once"].append(per_step(lambda: made, steps))
    each, once = min(runs["made each step"]), min(runs["made once"])
    print(f"  {name}: {sum(1 for _ in model.modules())} modules, {len(made.patches)} taken; CPU ms per step: "
          f"made each step {each * 1e3:.3f}, made once {once * 1e3:.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7, help="alternated rounds, the best of each counts")
    ap.add_argument("--steps", type=int, default=200, help="steps (entries) timed per round")
    args = ap.parse_args()
    import torch
    torch.set_num_threads(1)
    from qwen.config import Config
    from qwen.model import Qwen35, load_model
    from qwen.tiny import tiny_model_path
    print(f"== entering fast_products per decode step (1 thread; best of {args.rounds} alternated rounds of "
          f"{args.steps} steps; load {os.getloadavg()[0]:.1f}) ==")
    cfg = Config.from_dict(json.loads(MANIFEST.read_text(encoding="utf-8"))["config"], source="manifest")
    with torch.device("meta"):
        full = Qwen35(cfg)
    compare("full-size text model (meta weights: the walk alone)", full, args.rounds, args.steps)
    compare("tiny checkpoint (text only)", load_model(tiny_model_path(), vision=False), args.rounds, args.steps)
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
