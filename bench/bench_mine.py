"""--mine's checks: what a prompt pass and a decode step cost with your parts in, checked at every call.

    python bench/bench_mine.py [--model PATH | --full [--keep DIR]] [--repeat N]

Side by side in one process: the course's parts, then each model part alone as --mine runs it (the
course's reference solution standing in as your file, so every call is checked and none is
refused), then all of them. Each row: best of --repeat, interleaved, so drift hits all rows alike.
A checked part runs twice (yours on copies of the inputs, the reference on the same inputs) and is
compared: the ratio is that price, not the speed of a learner's own code. Default: the built-in
tiny checkpoint; --full writes (or reuses) a full-size one with random weights.
"""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Pressure, cpu_line, full_checkpoint  # noqa: E402

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--model", help="a checkpoint folder (default: the built-in tiny checkpoint)")
p.add_argument("--full", action="store_true", help="a full-size checkpoint with random weights")
p.add_argument("--keep", help="with --full: write (or reuse) it here instead of a temp folder")
p.add_argument("--repeat", type=int, default=5)
p.add_argument("--tokens", type=int, default=64, help="the prompt's length")
args = p.parse_args()

import torch  # noqa: E402

from practice._judge import runner  # noqa: E402
from practice._judge.exercises import BY_ID  # noqa: E402
from practice import mine  # noqa: E402
from qwen.model import load_model  # noqa: E402

if args.full:
    path = full_checkpoint(args.keep)
elif args.model:
    path = Path(args.model)
else:
    from engine.tiny import tiny_model_path
    path = tiny_model_path()
model = load_model(path, vision=False)
prompt = torch.arange(args.tokens).remainder(model.cfg.vocab_size - 1).add(1).reshape(1, -1)
references = {i: mine._load(runner, BY_ID[i].solution, BY_ID[i].functions) for i in mine.PARTS}
setups = {"course's parts": []} | {f"{i} {mine.PARTS[i].name[0]}": [i] for i in mine.PARTS} | \
    {"all 10 yours": list(mine.PARTS)}


def timed(ids):
    """(prompt pass s, decode step s) with the exercises `ids` in, checked; also the refusals (none expected)."""
    yours = mine.Mine(model, mine.Solutions({i: references[i] for i in ids}, [], "")) if ids else None
    try:
        cache = model.new_cache()
        t = time.perf_counter()
        model(prompt, cache=cache)
        prompt_s = time.perf_counter() - t
        t = time.perf_counter()
        model(prompt[:, -1:], cache=cache)
        decode_s = time.perf_counter() - t
    finally:
        if yours is not None:
            yours.remove()
    return prompt_s, decode_s, dict(yours.refused) if yours else {}


best = {k: [float("inf"), float("inf")] for k in setups}
refused = {}
pressure = Pressure()
with torch.no_grad():
    for name, ids in setups.items():                                       # warm: tolerances, references
        timed(ids)
    for _ in range(args.repeat):
        for name, ids in setups.items():
            a, b, r = timed(ids)
            best[name] = [min(best[name][0], a), min(best[name][1], b)]
            refused.update(r)

print(cpu_line())
print(f"checkpoint: {path} ({model.cfg.num_hidden_layers} layers, hidden {model.cfg.hidden_size}); "
      f"prompt {args.tokens} tokens; best of {args.repeat}, torch threads {torch.get_num_threads()}")
base = best["course's parts"]
print(f"  {'':<28} {'prompt pass':>12} {'x course':>9} {'decode step':>12} {'x course':>9}")
for name, (a, b) in best.items():
    print(f"  {name:<28} {a * 1e3:9.2f} ms {a / base[0]:8.2f}x {b * 1e3:9.2f} ms {b / base[1]:8.2f}x")
print("refused:", refused or "none")
print(pressure.verdict())
