"""Benchmark of the thread policy (engine/threads.py): prefill and decode with 1 thread against torch's default.

For each checkpoint (the built-in tiny one; with --full also a full-size one with the real 0.8B
inventory and random values, bench/common.py) and each condition:

  as it is      the machine as it is now (its load average is printed: "quiet" only if it says so);
  busy          with --busy competing processes started here, each spinning on one core in pure
                Python, bounded by --busy-seconds and stopped at the end of the condition;

one fresh process loads the model once and runs, alternately, `--rounds` times:
  1 thread      torch.set_num_threads(1);
  default       torch's default, one thread per core (what a chapter gets without the policy);
  policy        what engine.threads.choose() picks there (printed), as chapters and chat use.
Each run is a greedy generation of --new tokens after a --prompt-token prompt (qwen.generate.generate_ids):
prefill = prompt tokens / seconds to the first new token; decode = the other new tokens / their seconds.
The best run of each setting counts. The environment's OMP_NUM_THREADS and QWEN_THREADS are removed
for the children, so "default" is torch's own.

    python bench/bench_threads.py [--full] [--keep DIR] [--busy 1] [--busy-seconds 600] [--rounds 3]
                                  [--prompt 64] [--new 16]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import ENV, full_checkpoint  # noqa: E402

SPIN = "import sys, time\nend = time.time() + float(sys.argv[1])\nwhile time.time() < end:\n    pass\n"
SETTINGS = ("1 thread", "default", "policy")


def child(path, rounds, prompt, new, out):
    """One process, one model; the three settings alternate, `rounds` times; the best of each."""
    import torch
    from engine import threads
    from qwen.generate import generate_ids
    from qwen.model import load_model
    from engine.tiny import is_tiny

    torch.set_grad_enabled(False)
    model = load_model(path, vision=False)
    chosen = threads.choose(small=is_tiny(model.cfg))
    counts = {"1 thread": 1, "default": threads.DEFAULT, "policy": chosen.threads}
    ids = torch.randint(0, min(model.cfg.vocab_size, 248000), (prompt,), generator=torch.Generator().manual_seed(0))
    torch.set_num_threads(1)
    list(generate_ids(model, ids[:8].tolist(), max_new_tokens=2))          # warm-up: first-call costs
    best = {name: [0.0, 0.0] for name in SETTINGS}
    for _ in range(rounds):
        for name in SETTINGS:
            torch.set_num_threads(counts[name])
            stats = {}
            list(generate_ids(model, ids.tolist(), max_new_tokens=new, stats=stats))
            speeds = (stats["prompt_tokens"] / stats["prefill_s"], (stats["new_tokens"] - 1) / stats["decode_s"])
            best[name] = [max(a, b) for a, b in zip(best[name], speeds)]
    out.write_text(json.dumps(dict(best=best, counts=counts, why=chosen.why_en, load=os.getloadavg()[0])))


def load_average():
    return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def run_condition(path, args, busy):
    """The child's result under `busy` competing spinners (0: the machine as it is)."""
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN, str(args.busy_seconds)]) for _ in range(busy)]
    try:
        if spinners:
            time.sleep(2)                                           # let them reach their cores
        before = load_average()
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "result.json"
            env = {k: v for k, v in ENV.items() if k not in ("OMP_NUM_THREADS", "QWEN_THREADS")}
            subprocess.run([sys.executable, __file__, "--child", "--path", str(path), "--rounds", str(args.rounds),
                            "--prompt", str(args.prompt), "--new", str(args.new), "--out", str(out)],
                           check=True, env=env, timeout=args.busy_seconds)
            result = json.loads(out.read_text(encoding="utf-8"))
        result["load_before"], result["load_after"] = before, load_average()
        return result
    finally:
        for s in spinners:
            s.kill()
            s.wait()


def print_model(name, results, args):
    print(f"\n== {name}: prompt {args.prompt} tokens, {args.new} new; best of {args.rounds} alternated runs ==")
    print(f"{'condition':<22}{'setting':<22}{'prefill tok/s':>14}{'decode tok/s':>14}"
          f"{'prefill x':>11}{'decode x':>10}")
    for condition, r in results.items():
        base = r["best"]["default"]
        for setting in SETTINGS:
            pre, dec = r["best"][setting]
            label = f"{setting} ({r['counts'][setting]})"
            print(f"{condition:<22}{label:<22}{pre:>14.1f}{dec:>14.2f}{pre / base[0]:>10.2f}x{dec / base[1]:>9.2f}x")
        print(f"{'':<22}(x: against default; load average before {r['load_before']}, after {r['load_after']}; "
              f"policy: {r['why']})")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--full", action="store_true", help="also a full-size checkpoint (1.75 GB written, 3 GB in RAM)")
    p.add_argument("--keep", help="write (or reuse) the full-size checkpoint here (implies --full)")
    p.add_argument("--busy", type=int, default=1, help="competing busy processes in the busy condition")
    p.add_argument("--busy-seconds", type=float, default=600, help="longest a spinner (and a condition) may run")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--new", type=int, default=16)
    p.add_argument("--child", action="store_true"), p.add_argument("--path"), p.add_argument("--out")
    args = p.parse_args()
    if args.child:
        return child(args.path, args.rounds, args.prompt, args.new, Path(args.out))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from engine.threads import cores
    print(f"{cores()} cores; `uptime`: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    code = "from engine.tiny import tiny_model_path; print(tiny_model_path())"
    models = {"tiny checkpoint": Path(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                                     env=ENV, check=True).stdout.strip())}
    full = args.full or args.keep
    if full:
        models["full-size checkpoint (fp32)"] = full_checkpoint(args.keep)
    conditions = {"as it is": 0, f"busy (+{args.busy} spinning)": args.busy}
    try:
        for name, path in models.items():
            print_model(name, {c: run_condition(path, args, busy) for c, busy in conditions.items()}, args)
    finally:
        if full and not args.keep:
            import shutil
            shutil.rmtree(models["full-size checkpoint (fp32)"], ignore_errors=True)


if __name__ == "__main__":
    main()
