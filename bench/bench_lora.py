"""Benchmark of chapter 16: one LoRA training step, ours against transformers + PEFT, on a full-size checkpoint.

The checkpoint has the real 0.8B inventory (bench/common.py: real names, shapes and dtypes, random
values). Both sides train the same rank-8 adapter (alpha 16, qwen.lora.DEFAULT_TARGETS: every
layer's projections but the DeltaNet's in_proj_a and in_proj_b) on the same batches of SEQ random
token ids, every position counted:

  ours     qwen.model.load_model + qwen.lora.add_lora, the loss qwen.train.next_token_loss over
           model(ids), backward, qwen.train.AdamW on the adapters;
  theirs   transformers' Qwen3_5ForCausalLM.from_pretrained + peft.PeftModel.from_pretrained(ours'
           adapter file, is_trainable=True), model(input_ids, labels=...).loss, backward,
           torch.optim.AdamW on the adapters.

Each side runs in its own fresh process (so its peak memory is its own), with the same number of
threads, one warm-up step and then --steps timed steps; rounds alternate ours / theirs and the best
median step of each side counts. The losses of both are printed step by step: they start from the
same adapter, so they agree as far as fp32 sums in another order allow (they show the two compute the
same training, not that the bench is fast). Peak memory is the process's peak RSS (VmHWM, with the
model loaded); "during steps" is that peak less the RSS before the first step.

Targets: our step time <= 1.0x theirs, our peak RSS <= 1.0x theirs. Needs the dev extra (transformers,
peft); at the defaults it keeps two cores busy for several minutes.

    python bench/bench_lora.py [--keep DIR] [--threads 2] [--seq 512] [--steps 3] [--rounds 2]
                               [--dtype float32|bfloat16]
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import ENV, ROOT, Pressure, cpu_line, full_checkpoint  # noqa: E402

RANK, ALPHA, LR = 8, 16, 1e-4


def _memory(field):
    """A field of /proc/self/status in MB (VmRSS now, VmHWM the peak so far); None off Linux."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _batches(steps, seq, vocab):
    import torch
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, vocab, (1, seq), generator=g) for _ in range(steps)]


def child(args):
    """One side's training steps, printed as one JSON line."""
    import torch
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    from qwen.config import Config
    vocab = Config.load(args.path).vocab_size
    batches = _batches(args.steps + 1, args.seq, vocab)            # the first is the warm-up
    if args.child == "ours":
        from qwen.lora import add_lora, load_adapter, save_adapter
        from qwen.model import load_model
        from qwen.train import AdamW, decay_groups, next_token_loss
        model = load_model(args.path, dtype=dtype, vision=False)
        adapter = Path(args.adapter)
        if (adapter / "adapter_model.safetensors").is_file():
            load_adapter(model, adapter)
        else:                                                      # the first round writes the adapter both train
            torch.manual_seed(0)
            save_adapter(add_lora(model, r=RANK, alpha=ALPHA), adapter)
        model.train()
        opt = AdamW(decay_groups(model, 0.0), lr=LR)

        def loss_of(ids):
            return next_token_loss(model(ids), ids)
    else:
        import peft
        import transformers
        transformers.logging.set_verbosity_error()
        base = transformers.Qwen3_5ForCausalLM.from_pretrained(args.path, dtype=dtype)
        model = peft.PeftModel.from_pretrained(base, args.adapter, is_trainable=True)
        model.train()
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=LR, weight_decay=0.0)

        def loss_of(ids):
            return model(input_ids=ids, labels=ids).loss
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    before = _memory("VmRSS")
    times, losses = [], []
    for i, ids in enumerate(batches):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_of(ids)
        loss.backward()
        opt.step()
        if i:
            times.append(time.perf_counter() - start)
        losses.append(loss.item())
    print(json.dumps({"step": statistics.median(times), "losses": losses, "trainable": trained,
                      "before": before, "peak": _memory("VmHWM")}), flush=True)


def run_child(args, side, adapter):
    argv = [sys.executable, __file__, "--child", side, "--path", str(args.path), "--adapter", str(adapter),
            "--threads", str(args.threads), "--seq", str(args.seq), "--steps", str(args.steps), "--dtype", args.dtype]
    env = {**ENV, "OMP_NUM_THREADS": str(args.threads)}
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{side} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keep", help="write (or reuse) the full-size checkpoint here instead of a temp folder")
    p.add_argument("--threads", type=int, default=2, help="torch threads of each side (default 2)")
    p.add_argument("--seq", type=int, default=512, help="tokens per batch (one sequence)")
    p.add_argument("--steps", type=int, default=3, help="timed steps per process, after one warm-up step")
    p.add_argument("--rounds", type=int, default=2, help="fresh processes per side, alternated")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"), help="the frozen base's dtype")
    p.add_argument("--child", choices=("ours", "theirs"), help=argparse.SUPPRESS)
    p.add_argument("--path", help=argparse.SUPPRESS)
    p.add_argument("--adapter", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args)
    if min(args.threads, args.seq, args.steps, args.rounds) < 1 or args.seq < 2:
        raise SystemExit("--threads, --steps and --rounds must be at least 1, --seq at least 2")
    import importlib.util
    if missing := [m for m in ("transformers", "peft") if importlib.util.find_spec(m) is None]:
        raise SystemExit(f"bench_lora.py compares with transformers + PEFT; {' and '.join(missing)} not installed: "
                         f"pip install -e \".[dev]\"")

    print(cpu_line())
    print(f"torch threads: {args.threads}; base {args.dtype}, adapters fp32, rank {RANK}, alpha {ALPHA}; "
          f"{args.seq} tokens a step; {args.steps} timed steps after 1 warm-up, {args.rounds} rounds")
    pressure = Pressure()
    args.path = full_checkpoint(args.keep)
    runs = {"ours": [], "theirs": []}
    with tempfile.TemporaryDirectory(prefix="qwen-lora-") as adapter:
        for r in range(args.rounds):
            for side in ("ours", "theirs") if r % 2 == 0 else ("theirs", "ours"):   # ours first: it writes the adapter
                runs[side].append(run_child(args, side, adapter))
    if not args.keep:
        import shutil
        shutil.rmtree(args.path, ignore_errors=True)

    best = {side: min(runs[side], key=lambda x: x["step"]) for side in runs}
    peak = {side: max(x["peak"] for x in runs[side]) for side in runs}
    during = {side: max(x["peak"] - x["before"] for x in runs[side]) for side in runs}
    print(f"\ntrainable parameters: ours {best['ours']['trainable']:,}, theirs {best['theirs']['trainable']:,}")
    print("loss, step by step (warm-up first), first round of each:")
    for side in runs:
        print(f"  {side:<7} " + "  ".join(f"{x:.5f}" for x in runs[side][0]["losses"]))
    gap = max(abs(a - b) / abs(b) for a, b in zip(runs["ours"][0]["losses"], runs["theirs"][0]["losses"]))
    print(f"  largest relative difference: {gap:.1e}")
    print(f"\n{'':<8} {'step s (median, best round)':>28} {'peak RSS MB':>12} {'during steps MB':>16}")
    for side in runs:
        print(f"{side:<8} {best[side]['step']:>28.2f} {peak[side]:>12.0f} {during[side]:>16.0f}")
    ratios = [("step time, ours / theirs (x)", best["ours"]["step"] / best["theirs"]["step"], 1.0),
              ("peak RSS, ours / theirs (x)", peak["ours"] / peak["theirs"], 1.0)]
    print()
    for text, value, limit in ratios:
        print(f"{'PASS' if value <= limit else 'FAIL'}  {text:<40} {value:>6.2f}  (target <= {limit})")
    print(pressure.verdict())
    print(cpu_line())
    sys.exit(0 if all(v <= lim for _, v, lim in ratios) else 1)


if __name__ == "__main__":
    main()
