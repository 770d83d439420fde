"""Benchmark of chapter 12: speculative greedy decoding with the MTP head, on a full-size checkpoint.

The checkpoint has the real 0.8B inventory (488 tensors, the 15 mtp.* included) with random
values (bench/common.py). Random weights mean the head's own guesses almost never agree with the
model (its measured acceptance is printed, near 0): the speed of accepted drafts is shown with
drafts REPLAYED from a plain run (every one accepted), and the speed at a trained head's
acceptance is a PROJECTION from the measured costs, with its formula. Neither is a measurement on
a trained model.

For each compute dtype (fp32, bf16), in its own fresh process, after a PROMPT-token prompt,
each item timed alternately with the others, `--rounds` times, the best counts:

  decode        one plain decode step (1 token, logits of the last position), as generate_ids
                runs it (engine/products.py: one row through oneDNN), and once with F.linear;
  verify k+1    one verification pass of k + 1 tokens (logits of every position, the Gated
                DeltaNet layers keeping every token's state), k = 1..4: goal <= 1.3 x decode at k = 3;
                with fp32 products as engine/products.py chooses them, and once (k = 3) with F.linear;
                the states go into trails made once, as speculative_ids does, and once (k = 3) into
                trails made anew (fresh memory every pass; qwen/mtp.py Trail); then (fp32) the 4-row
                products of each of the model's weight shapes, turned around and in oneDNN (the
                path engine/products.py takes is marked);
  draft         one head step (fc, its decoder layer, mtp.norm, the 248,320-row output layer), as
                speculative_ids runs it (engine/products.py);
  draft (cut)   the same, guessing among the CUT most frequent tokens of the course's prose only
                (DraftVocabulary): goal <= 0.25 x decode. The main model still picks every token.

Then NEW tokens, plain against speculative (k = 3, cut vocabulary, replayed drafts: the tokens the
speculative run itself keeps, the plain run's in fp32), alternated:
decode tokens/s (goal >= 2x plain); and for k = 1..4 with the head's own (random) guesses: the
output equals plain greedy, token for token, in fp32 (in bf16 it prints how many tokens of N matched).

    python bench/bench_speculative.py [--keep DIR] [--dtypes float32,bfloat16] [--rounds 5]
                                      [--prompt 64] [--new 64] [--cut 32768]
"""
import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import ROOT, SPEED_ENV, Pressure, full_checkpoint  # noqa: E402

ACCEPTANCE = (0.65, 0.8)            # third-party reports for this head, not measured here
PROSE = ["README.md", "ch01_weights.py", "ch02_embedding.py", "ch03_norm.py", "ch04_rope.py", "ch05_mlp.py"]
HELD_OUT = ["ch06_attention.py", "ch07_deltanet.py", "ch08_model.py", "ch09_generate.py"]


def prose_tokens(tok, files):
    """The course's own text (English and Chinese), through the real tokenizer: one id list per file."""
    return [tok.encode((ROOT / f).read_text(encoding="utf-8")) for f in files if (ROOT / f).is_file()]


def best(times):
    return min(times)


def progress(what):
    print(f"  [{time.strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)


def child(path, dtype_name, args):
    import torch
    from qwen.generate import generate_ids
    from qwen.model import load_model
    from engine.speculative import DraftVocabulary, coverage, frequent_tokens, replaying as replayed
    from qwen.mtp import head_read, head_scores, load_head, new_trails, speculative_ids, verify as _verify
    from engine.products import fast as fast_products
    from engine.tokens import load_tokenizer

    model = load_model(path, dtype=getattr(torch, dtype_name))
    load_head(model)
    tok = load_tokenizer(path)
    vocab = tok.vocab_size
    ids = torch.randint(0, 248000, (args.prompt,), generator=torch.Generator().manual_seed(1)).tolist()
    cut_ids = frequent_tokens(prose_tokens(tok, PROSE), args.cut)
    held = [t for ids_ in prose_tokens(tok, HELD_OUT) for t in ids_]
    cut = DraftVocabulary(model, cut_ids)
    out = dict(dtype=dtype_name, threads=torch.get_num_threads(), cut=len(cut), coverage=coverage(cut_ids, held),
               held_out_tokens=len(held))

    with torch.inference_mode():
        base = model.new_cache()
        keep = []
        logits = model(torch.tensor([ids]), cache=base, last=True, keep=keep)
        hidden = model.norm(keep[-1])                                          # (1, prompt, hidden)
        p = int(logits[0, -1, :vocab].argmax())
        head = model.mtp.new_cache()
        g = head_read(model, ids[1:] + [p], hidden, head, 0)[:, -1:]
        block = [p] + [int(t) for t in torch.randint(0, 248000, (4,), generator=torch.Generator().manual_seed(2))]

        products = fast_products                                               # the engine's kernel (qwen/linear.py's seam)

        def decode(fast=True):
            def run():
                c = base.copy()                                                # (outside the clock)
                start = time.perf_counter()
                with products() if fast else contextlib.nullcontext():
                    model(torch.tensor([[p]]), cache=c, last=True)
                return time.perf_counter() - start
            return run

        trails = new_trails(model)                                             # a run's own, as speculative_ids

        def verify(k, fast=True, anew=False):
            def run():
                c = base.copy()
                start = time.perf_counter()
                with products() if fast else contextlib.nullcontext():
                    _verify(model, block[:k + 1], c, trails=None if anew else trails)
                return time.perf_counter() - start
            return run

        def draft(c):
            def run():
                h = head.copy()
                start = time.perf_counter()
                with products():
                    g2 = head_read(model, [p], g, h, args.prompt)
                    int((c or head_scores)(model, g2, [], [])[:vocab].argmax())
                return time.perf_counter() - start
            return run

        items = {"decode": decode(), "decode, F.linear": decode(fast=False), **{f"verify {k + 1}": verify(k) for k in (1, 2, 3, 4)},
                 "verify 4, F.linear": verify(3, fast=False), "verify 4, trail made anew": verify(3, anew=True),
                 "draft": draft(None), "draft (cut)": draft(cut)}
        progress("steps: warm-up")
        for fn in items.values():                                              # warm-up
            fn()
        times = {name: [] for name in items}
        for _ in range(args.rounds):
            for name, fn in items.items():
                times[name].append(fn())                                       # seconds, the cache copy left out
        out["step_s"] = {name: best(t) for name, t in times.items()}
        if dtype_name == "float32":
            progress("4-row products by weight shape")
            out["by_shape"] = products_by_shape(model, args.rounds)

    progress("plain and replayed runs")
    plain = list(generate_ids(model, ids, max_new_tokens=args.new, vocab=vocab))

    def replaying(tokens):
        return lambda out_, guesses: tokens[len(out_):len(out_) + len(guesses)]

    # Perfect drafts are the tokens the speculative run itself keeps. In fp32 those are the plain run's
    # (checked below); in bf16 a verify pass of 4 rows rounds otherwise than a 1-row step, a near-tie can
    # flip, and from there the plain run's tokens are no drafts the model agrees with. So replay the
    # speculative run's own output until it stops changing (a fixed point: then the drafts are its own tokens).
    reference, fixed = plain, False
    for settled in range(1, 5):
        got = list(speculative_ids(model, ids, 3, max_new_tokens=args.new, vocab=vocab,
                                   guess=replayed(replaying(reference), cut)))
        fixed = got == reference
        if fixed:
            break
        reference = got
    out.update(replay_settled=settled, replay_fixed=fixed)
    replay = replayed(replaying(reference), cut)
    runs = {"plain": [], "speculative k=3, cut, replayed drafts": []}
    for _ in range(max(1, args.rounds // 2)):
        st = {}
        list(generate_ids(model, ids, max_new_tokens=args.new, vocab=vocab, stats=st))
        runs["plain"].append((args.new - 1) / st["decode_s"])
        st = {}
        got = list(speculative_ids(model, ids, 3, max_new_tokens=args.new, vocab=vocab, stats=st, guess=replay))
        runs["speculative k=3, cut, replayed drafts"].append((args.new - 1) / st["decode_s"])
        out.update(replay_rounds=st["rounds"], replay_accepted=st["accepted"], replay_drafted=st["drafted"],
                   replay_exact=got == plain, replay_first_difference=_first_difference(got, plain))
    out["tokens_per_s"] = {name: max(v) for name, v in runs.items()}

    exact, drafted, accepted = {}, 0, 0
    for k in (1, 2, 3, 4):
        progress(f"exactness, the head's own guesses, k = {k}")
        st = {}
        got = list(speculative_ids(model, ids, k, max_new_tokens=args.new, vocab=vocab, stats=st))
        same = _first_difference(got, plain)
        exact[k] = f"yes ({len(plain)} of {len(plain)})" if got == plain else f"no (the first {same} of {len(plain)} match)"
        drafted += st["drafted"]
        accepted += st["accepted"]
    out.update(exact=exact, drafted=drafted, accepted=accepted)
    return out


LAYERS = {"gate_proj": "gate/up", "up_proj": "gate/up", "down_proj": "down", "fc": "mtp fc"}   # the others: as named


def products_by_shape(model, rounds, rows=4):
    """The model's own large fp32 weights, grouped by shape, each group multiplied by `rows` rows both
    ways engine/products.py offers, each way called once first, then alternated `rounds` times:
    {shape: (weights, layer names, best ms per weight turned around, in oneDNN, the way
    products.linear takes: products.path)}."""
    import collections
    import torch
    from engine import products
    groups, names = collections.defaultdict(list), collections.defaultdict(set)
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Linear) and m.bias is None and products.takes(m.weight):
            groups[tuple(m.weight.shape)].append(m.weight)
            last = name.rsplit(".", 1)[-1]
            names[tuple(m.weight.shape)].add(LAYERS.get(last, last))
    groups[tuple(model.output_weight.shape)].append(model.output_weight)
    names[tuple(model.output_weight.shape)].add("output layer")
    ways = {"turned": products.few_rows_linear, "oneDNN": products.onednn_linear}
    out = {}
    for shape, weights in groups.items():
        x = torch.randn(1, rows, shape[1])
        times = {name: [] for name in ways}
        for fn in ways.values():                               # warm-up
            fn(x, weights[0])
        for _ in range(rounds):
            for name, fn in ways.items():
                start = time.perf_counter()
                for w in weights:
                    fn(x, w)
                times[name].append((time.perf_counter() - start) / len(weights))
        chosen = next((name for name, fn in ways.items() if fn is products.path(x, weights[0])), "F.linear")
        out["%d x %d" % shape] = (len(weights), ", ".join(sorted(names[shape])),
                                  *(min(t) * 1e3 for t in times.values()), chosen)
    return out


def _first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


def projection(r_draft, r_verify, k, a):
    """Tokens per round over the round's cost in decode steps: ((1 - a^(k+1)) / (1 - a)) / (k r_d + r_v)."""
    return (1 - a ** (k + 1)) / (1 - a) / (k * r_draft + r_verify)


def report(r):
    s = r["step_s"]
    d = s["decode"]
    print(f"\n== {r['dtype']}, {r['threads']} threads ==")
    print(f"  one decode step                                 {d * 1e3:8.1f} ms   (engine/products.py; "
          f"with F.linear: {s['decode, F.linear'] * 1e3:.1f} ms)")
    for k in (1, 2, 3, 4):
        ratio = s[f"verify {k + 1}"] / d
        print(f"  verify {k + 1} tokens (k = {k}) / decode step           {ratio:8.2f}"
              + ("   (goal <= 1.3)" if k == 3 else "")
              + ("   NOT PLAUSIBLE: a verify pass reads the same weights as a step; the machine was busy" if ratio < 1 else ""))
    print(f"  verify 4 tokens with F.linear (the plain path) / decode step {s['verify 4, F.linear'] / d:5.2f}"
          f"   (the lines above: engine/products.py)")
    print(f"  verify 4 tokens, trails made anew / decode step {s['verify 4, trail made anew'] / d:6.2f}"
          f"   (the verify lines above reuse one run's trails)")
    if "by_shape" in r:
        print("  4-row products by weight shape, ms per weight (best): turned around, (W @ x^T)^T | oneDNN"
              "   (* engine/products.py's choice)")
        for shape, (n, names, turned, onednn, chosen) in r["by_shape"].items():
            marks = {"turned": "*" if chosen == "turned" else " ", "oneDNN": "*" if chosen == "oneDNN" else " "}
            print(f"    {shape:<14} {turned:8.3f}{marks['turned']} | {onednn:7.3f}{marks['oneDNN']}   "
                  f"{n} weight{'s' if n > 1 else ''}: {names}")
    print(f"  draft step, whole vocabulary / decode step      {s['draft'] / d:8.2f}")
    print(f"  draft step, {r['cut']:,} most frequent tokens / decode  {s['draft (cut)'] / d:8.2f}   (goal <= 0.25)")
    print(f"  the cut covers {r['coverage']:.1%} of {r['held_out_tokens']:,} tokens of held-out course prose "
          f"(ch06-ch09): a bound on the acceptance it keeps")
    t = r["tokens_per_s"]
    plain, spec = t["plain"], t["speculative k=3, cut, replayed drafts"]
    print(f"  decode tokens/s, plain                          {plain:8.2f}")
    print(f"  decode tokens/s, k = 3, REPLAYED drafts ({r['replay_accepted']} of {r['replay_drafted']} accepted, "
          f"{r['replay_rounds']} passes) {spec:8.2f}  = {spec / plain:.2f}x plain   (goal >= 2)")
    print(f"  replayed run == plain greedy: {r['replay_exact']}"
          + ("" if r["replay_exact"] else f" (first difference at token {r['replay_first_difference']}; the drafts "
             f"replayed are the speculative run's own tokens, settled after {r['replay_settled']} run(s): "
             f"{'yes' if r['replay_fixed'] else 'NO, not all drafts can be accepted'})"))
    print(f"  the head's own guesses (random weights): {r['accepted']} of {r['drafted']} accepted "
          f"({r['accepted'] / max(1, r['drafted']):.1%}): near 0, as random weights must be")
    claim = "exact in fp32" if r["dtype"] == "float32" else "bf16: a near-tie can flip, tokens matched"
    print(f"  speculative == plain greedy, {r['new']} tokens ({claim}): "
          + ", ".join(f"k={k}: {v}" for k, v in r["exact"].items()))
    print("  PROJECTION (not measured on a trained model): speed-up = ((1 - a^(k+1)) / (1 - a)) / (k r_d + r_v),")
    print("  r_d = draft / decode, r_v = verify(k+1) / decode, measured above")
    for name, rd in (("whole vocabulary", s["draft"] / d), ("cut vocabulary", s["draft (cut)"] / d)):
        for a in ACCEPTANCE:
            best_k = max((1, 2, 3, 4), key=lambda k: projection(rd, s[f"verify {k + 1}"] / d, k, a))
            print(f"    a = {a:.2f}, {name:<16}: k = 3: {projection(rd, s['verify 4'] / d, 3, a):.2f}x;  best k = {best_k}: "
                  f"{projection(rd, s[f'verify {best_k + 1}'] / d, best_k, a):.2f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", help="folder to keep (and reuse) the full-size checkpoint in")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--cut", type=int, default=32768)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        r = child(args.path, args.child, args)
        r["new"] = args.new
        print("RESULT " + json.dumps(r))
        return
    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} (uptime)")
    path = full_checkpoint(args.keep)
    pressure = Pressure()
    for dtype in args.dtypes.split(","):
        argv = [sys.executable, __file__, "--child", dtype, "--path", str(path), "--rounds", str(args.rounds),
                "--prompt", str(args.prompt), "--new", str(args.new), "--cut", str(args.cut)]
        p = subprocess.run(argv, cwd=ROOT, env=SPEED_ENV, stdout=subprocess.PIPE, text=True)   # progress: stderr
        lines = [line for line in p.stdout.splitlines() if line.startswith("RESULT ")]
        if p.returncode or not lines:
            raise SystemExit(f"{dtype} failed:\n{p.stdout}")
        report(json.loads(lines[-1][len("RESULT "):]))
    load = os.getloadavg()
    print(f"\nload average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    print(pressure.verdict())


if __name__ == "__main__":
    main()
