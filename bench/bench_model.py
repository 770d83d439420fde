"""Benchmark of chapters 8-9: the whole model against transformers' Qwen3.5, on a full-size checkpoint.

The checkpoint has the real 0.8B inventory (488 tensors, real names, shapes, dtypes) with
random values (bench/common.py). For each compute dtype (fp32, bf16):

  load -> first token   load_model / from_pretrained, then the first token of a 16-token prompt;
  peak RSS              of the whole process (the kernel's ru_maxrss): each side in its own fresh
                        process, `--repeat` times, alternated; the best time and the largest RSS
                        count. The memory target is checked on what the run adds to a process
                        that has only imported torch (measured here too: ~220 MB, 15% of the bf16
                        weights, none of it ours);
  prefill               a 512-token prompt, to its first new token: tokens per second;
  decode                the 64 tokens after it, one at a time with the cache: tokens per second.
                        Both models in one process, run alternately `--rounds` times, the best run
                        of each counts: side by side, so both see the same machine (from one
                        fresh process to the next, decode speed alone varied by +-15% here).

Both sides generate greedily, with no stop token, through their own generation loop (ours:
qwen.generate.generate_ids; transformers: generate() with its DynamicCache, timed by a streamer).
Then, in fp32: logits of a 32-token input and 32 greedy tokens, ours against transformers';
and our decode time per token at 256, 1024 and 4096 tokens of context.

Where a decode step goes: one step after a 32-token prompt, timed part by part with
plain timers around the output layer, the other projections, the delta rule, attention (the
scores and the KV append), the norms, the conv and the embedding; the rest is Python, dispatch
and the small ops between them (rope, gates, reshapes, residual adds), and the number of aten
ops a step dispatches times the measured cost of one tiny op estimates the dispatch part. The
bandwidth reached is the bytes of weights a step reads (all of them once, the tied table once
for the logits) over the step time, against this machine's read bandwidth measured in the same
run (torch.sum over a 1 GiB fp32 tensor, same threads, in its own process). These sections run
with glibc's allocator as a learner gets it (pinning it made our prefill slower), and
the first variant's breakdown once more pinned, beside it: the delta rule's 1 MiB states sit
exactly at the pinned mmap threshold.

The same step by ablation (`--ablation-rounds`, `--skip-ablation`): CPU seconds of the whole step
and of the step with one part replaced by a stand-in that computes nothing (the projections, the
output layer, the delta rule, the conv, the norms, the attention), alternated, the best of each: what a part
costs where it runs, with the caches and the allocator as the step leaves them, and a figure that
holds on a loaded machine (with 1 thread, CPU seconds barely move with the load; wall seconds double).

1-row products (`--skip-kernels`): the projections of 12 layers and the output layer, random
weights of the real shapes, fp32 and bf16, through F.linear, torch.mv, torch.mm(w, x^T), (fp32)
oneDNN's inner product as decoding runs it (engine/products.py), (bf16) an fp32 copy, and with the
weight stored (in, out); wall and CPU seconds, GB read per wall second, beside torch.sum's rate.

Quantized decoding (qwen/quant.py, chapter 13): fp32, bf16, int8 and int4 models, each in fresh
processes, alternated `--repeat` times: prefill and decode tokens/s (best) and ms / token against
its bound (the weights' bytes at the read bandwidth measured in the same run), the peak RSS
(largest; int8 / int4 as main.py 9 / chat --quant build them: engine.quantized.load_quantized, read
from the file and quantized a block of rows at a time) and the RSS once quantized, with the
greedy tokens compared against fp32's, and llama.cpp's q8_0 / q4_k_m figures beside.

The bf16 prompt pass (engine/upcast.py): a PROMPT-token prefill through generate_ids of the fp32
model and of the bf16 model as generate_ids reads it (projections of 8 rows or more in fp32), in
fresh processes alternated `--rounds` times, and once with bf16's own matmuls; wall and CPU
seconds (CPU seconds at 1 thread barely move with the machine's load), and the peak RSS each pass
adds; the goal is bf16 within 1.3x of fp32.

    python bench/bench_model.py [--keep DIR] [--threads N] [--dtypes float32,bfloat16] [--repeat 2]
                                [--rounds 3] [--skip-context] [--skip-fidelity] [--skip-compare]
                                [--skip-breakdown] [--skip-quant] [--skip-prompt] [--breakdown float32,int8]
                                [--skip-ablation] [--skip-kernels] [--ablation-rounds 9]
"""
import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import ENV, ROOT, full_checkpoint, measure, python  # noqa: E402

PROMPT, NEW, SHORT = 512, 64, 16


# --------------------------------------------------------------------------------------------- children

def _ids(n, seed):
    import torch
    return torch.randint(0, 248000, (1, n), generator=torch.Generator().manual_seed(seed))


def child_ours(path, dtype_name, out):
    import torch
    from qwen.generate import generate_ids
    from qwen.model import load_model

    start = time.perf_counter()
    model = load_model(path, dtype=getattr(torch, dtype_name), vision=False)
    next(generate_ids(model, _ids(SHORT, 1)[0].tolist(), max_new_tokens=1))
    first = time.perf_counter() - start
    cache = model.new_cache()                                 # then a whole run, for the peak RSS
    list(generate_ids(model, _ids(PROMPT, 2)[0].tolist(), max_new_tokens=NEW + 1, cache=cache))
    weights = sum(p.nbytes for p in model.parameters())
    out.write_text(json.dumps(dict(first_token_s=first, weights=weights, cache=cache.nbytes,
                                   logits=model.cfg.vocab_size * 4)))


def hf_stamped(model, ids, n):
    """transformers' greedy generation of n tokens, timed by a streamer: (the start time, the time each new
    token arrived, the new tokens). ids (1, prompt)."""
    import torch
    from transformers.generation.streamers import BaseStreamer

    class Clock(BaseStreamer):
        def __init__(self):
            self.times = []

        def put(self, value):
            self.times.append(time.perf_counter())

        def end(self):
            pass

    clock = Clock()
    begin = time.perf_counter()
    with torch.inference_mode():
        new = model.generate(ids, max_new_tokens=n, min_new_tokens=n, streamer=clock, do_sample=False,
                             eos_token_id=None, pad_token_id=0)
    return begin, clock.times[1:], new[0, ids.shape[1]:].tolist()    # put() #0 is the prompt itself


def _hf_generate(model, ids, n):
    """transformers' greedy generation of n tokens: (seconds to the first new token, seconds for the rest, tokens)."""
    begin, times, tokens = hf_stamped(model, ids, n)
    return times[0] - begin, times[-1] - times[0], tokens


def child_hf(path, dtype_name, out):
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    start = time.perf_counter()
    model = transformers.Qwen3_5ForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype_name)).eval()
    _hf_generate(model, _ids(SHORT, 1), 1)
    first = time.perf_counter() - start
    _hf_generate(model, _ids(PROMPT, 2), NEW + 1)             # then a whole run, for the peak RSS
    out.write_text(json.dumps(dict(first_token_s=first)))


def child_speed(path, dtype_name, out, rounds):
    """Prefill and decode, ours and transformers' alternately in one process; the best of each."""
    import torch
    import transformers
    from qwen.generate import generate_ids
    from qwen.model import load_model

    transformers.logging.set_verbosity_error()
    dtype = getattr(torch, dtype_name)
    ours = load_model(path, dtype=dtype, vision=False)
    theirs = transformers.Qwen3_5ForCausalLM.from_pretrained(path, dtype=dtype).eval()
    ids = _ids(PROMPT, 2)
    best = {"ours": [float("inf")] * 2, "hf": [float("inf")] * 2}
    for _ in range(rounds):
        stats = {}
        mine = list(generate_ids(ours, ids[0].tolist(), max_new_tokens=NEW + 1, stats=stats))
        prefill, decode, ref = _hf_generate(theirs, ids, NEW + 1)
        for side, times in (("ours", (stats["prefill_s"], stats["decode_s"])), ("hf", (prefill, decode))):
            best[side] = [min(a, b) for a, b in zip(best[side], times)]
    out.write_text(json.dumps(dict(best=best, tokens=mine, ref_tokens=ref)))


def child_fidelity(path, out):
    """fp32: logits over 32 tokens and 32 greedy tokens, ours against transformers', in one process."""
    import torch
    import transformers
    from qwen.generate import generate_ids
    from qwen.model import load_model

    transformers.logging.set_verbosity_error()
    ids = _ids(32, 3)
    with torch.inference_mode():
        ref_model = transformers.Qwen3_5ForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        ref = ref_model(input_ids=ids).logits.float()
        ref_greedy = ref_model.generate(ids, max_new_tokens=32, min_new_tokens=32, do_sample=False,
                                        eos_token_id=None, pad_token_id=0)[0, 32:].tolist()
        del ref_model
        ours = load_model(path, vision=False)
        diff = (ours(ids) - ref).abs().max().item()
        greedy = list(generate_ids(ours, ids[0].tolist(), max_new_tokens=32))
    out.write_text(json.dumps(dict(max_abs_diff=diff, logit_scale=ref.abs().max().item(),
                                   greedy_equal=greedy == ref_greedy, greedy_tokens=len(greedy))))


def child_context(path, out):
    """Our decode time per token with 256 / 1024 / 4096 tokens already in the cache (fp32).

    The cache is filled with random keys, values, conv windows and states of the right sizes:
    a decode step's cost depends on those sizes, not on the values."""
    import torch
    from qwen.model import load_model

    model = load_model(path, vision=False)
    cfg = model.cfg
    conv = 2 * cfg.linear_num_key_heads * cfg.linear_key_head_dim + cfg.linear_num_value_heads * cfg.linear_value_head_dim
    rows = {}
    with torch.inference_mode():
        for n in (256, 1024, 4096):
            cache = model.new_cache()
            for layer, c in zip(model.layers, cache.layers):
                if layer.kind == "full_attention":
                    c.k = torch.randn(1, cfg.num_key_value_heads, n, cfg.head_dim)
                    c.v = torch.randn(1, cfg.num_key_value_heads, n, cfg.head_dim)
                else:
                    c.conv = torch.randn(1, conv, cfg.linear_conv_kernel_dim - 1)
                    c.state = torch.randn(1, cfg.linear_num_value_heads, cfg.linear_key_head_dim,
                                          cfg.linear_value_head_dim) * 0.01
            cache.length = n
            token = torch.tensor([[100]])
            model(token, cache=cache, last=True)                 # warm-up step
            steps, start = 16, time.perf_counter()
            for _ in range(steps):
                model(token, cache=cache, last=True)
            rows[n] = dict(ms=(time.perf_counter() - start) / steps * 1000, cache=cache.nbytes)
    out.write_text(json.dumps(rows))


VARIANTS = ("float32", "bfloat16", "int8", "int4")


def _build(path, variant):
    """Our model as `variant`: a compute dtype, or int8 / int4 quantized from the stored bf16."""
    import torch
    from qwen.model import load_model
    from engine.quantized import load_quantized
    from qwen.quant import MODES
    if variant in MODES:
        return load_quantized(path, variant)                  # as main.py 9 / chat --quant: read a block at a time
    return load_model(path, dtype=getattr(torch, variant), vision=False)


def _warm_decode(model):
    """A cache after a 32-token prompt and two decode steps, and the token to step with next."""
    import torch
    cache = model.new_cache()
    model(_ids(32, 4), cache=cache, last=True)
    token = torch.tensor([[100]])
    for _ in range(2):
        model(token, cache=cache, last=True)                      # warm-up
    return cache, token


def _rss_now_mb():
    """This process's resident memory now (VmRSS), after the allocator has given back what it can."""
    import ctypes
    import gc
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child_bandwidth(out):
    """Read bandwidth: torch.sum over a 1 GiB fp32 tensor, the median of 7 passes."""
    import torch
    x = torch.ones(1 << 28)                                   # 1 GiB, written once (its pages are real)
    x.sum()
    times = []
    for _ in range(7):
        start = time.perf_counter()
        x.sum()
        times.append(time.perf_counter() - start)
    out.write_text(json.dumps(dict(gb_s=x.nbytes / sorted(times)[3] / 1e9)))


def _timed(fn, bucket, clock):
    """fn, with the seconds it takes added to clock[bucket] (nested timed calls count once, outermost)."""
    def wrapper(*args, **kwargs):
        if clock["_active"]:
            return fn(*args, **kwargs)
        clock["_active"] = True
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            clock[bucket] += time.perf_counter() - start
            clock["_active"] = False
    return wrapper


def _instrument(model, clock):
    """Put timers around each part of a decode step (instance attributes and module globals)."""
    import torch.nn as nn
    import qwen.attention
    import qwen.deltanet
    from qwen.norm import GatedRMSNorm, RMSNorm
    from qwen.quant import Int4Linear, Int8Linear
    for module in model.layers.modules():
        if isinstance(module, (nn.Linear, Int8Linear, Int4Linear)):
            module.forward = _timed(module.forward, "projections", clock)
        elif isinstance(module, (RMSNorm, GatedRMSNorm)):
            module.forward = _timed(module.forward, "norms", clock)
        elif isinstance(module, qwen.deltanet.GatedDeltaNet):
            module.causal_conv = _timed(module.causal_conv, "conv", clock)
    model.norm.forward = _timed(model.norm.forward, "norms", clock)
    model.logits = _timed(model.logits, "output layer", clock)
    model.embed_tokens.forward = _timed(model.embed_tokens.forward, "embedding", clock)
    for name in ("delta_rule_recurrent", "delta_rule_chunked"):
        setattr(qwen.deltanet, name, _timed(getattr(qwen.deltanet, name), "delta rule", clock))
    qwen.deltanet.l2norm = _timed(qwen.deltanet.l2norm, "norms", clock)
    for name in ("causal_attention", "remember"):
        setattr(qwen.attention, name, _timed(getattr(qwen.attention, name), "attention", clock))


def _aten_ops(fn):
    """How many aten ops one call of fn dispatches."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    with Count():
        fn()
    return Count.n


def child_breakdown(path, variant, out):
    """One decode step (after a 32-token prompt) part by part; the plain step time beside it."""
    import torch
    from engine.quantized import weight_bytes
    model = _build(path, variant)
    steps = 16
    with torch.inference_mode():
        cache, token = _warm_decode(model)
        plain = []
        for _ in range(steps):
            start = time.perf_counter()
            model(token, cache=cache, last=True)
            plain.append(time.perf_counter() - start)
        ops = _aten_ops(lambda: model(token, cache=cache, last=True))
        a, b = torch.ones(1), torch.ones(1)
        start = time.perf_counter()
        for _ in range(20000):
            torch.add(a, b)
        tiny_op = (time.perf_counter() - start) / 20000
        clock = dict.fromkeys(("output layer", "projections", "delta rule", "attention", "norms", "conv", "embedding"),
                              0.0)
        clock["_active"] = False
        _instrument(model, clock)
        start = time.perf_counter()
        for _ in range(steps):
            model(token, cache=cache, last=True)
        total = (time.perf_counter() - start) / steps
    clock.pop("_active")
    parts = {k: v / steps for k, v in clock.items()}
    out.write_text(json.dumps(dict(parts=parts, timed_total=total, plain=sorted(plain)[steps // 2], ops=ops,
                                   tiny_op=tiny_op, weight_bytes=weight_bytes(model),
                                   output_bytes=model.output_weight.nbytes if model.output_layer is None
                                   else model.output_layer.nbytes)))


def _stand_ins(model):
    """Context managers that each replace one part of a decode step by a stand-in of the same shape
    that computes nothing (the numbers go wrong; the time of the rest stays as it was)."""
    import contextlib
    import torch
    import torch.nn as nn
    import qwen.attention
    import qwen.deltanet
    from qwen.norm import GatedRMSNorm, RMSNorm
    from qwen.quant import Int4Linear, Int8Linear

    @contextlib.contextmanager
    def instances(modules, attr, fn):
        for m in modules:
            setattr(m, attr, fn(m))
        try:
            yield
        finally:
            for m in modules:
                delattr(m, attr)

    @contextlib.contextmanager
    def function(module, name, fn):
        real = getattr(module, name)
        setattr(module, name, fn)
        try:
            yield
        finally:
            setattr(module, name, real)

    def linears():
        kinds = (nn.Linear, Int8Linear, Int4Linear)
        return instances([m for m in model.layers.modules() if isinstance(m, kinds)], "forward",
                         lambda m: lambda x: x.new_zeros(*x.shape[:-1], m.out_features))
    zeros = torch.zeros(1, 1, model.cfg.vocab_size)
    logits = lambda: function(model, "logits", lambda h: zeros)                       # noqa: E731
    norms = lambda: instances([m for m in model.modules() if type(m) in (RMSNorm, GatedRMSNorm)], "forward",  # noqa: E731
                              lambda m: lambda x, gate=None: x)
    conv = lambda: instances([m for m in model.modules() if isinstance(m, qwen.deltanet.GatedDeltaNet)],  # noqa: E731
                             "causal_conv", lambda m: lambda qkv, cache=None: qkv)
    rule = lambda: function(qwen.deltanet, "delta_rule_recurrent",                    # noqa: E731
                            lambda q, k, v, g, beta, state=None, states=None: (v.float(), state))
    attention = lambda: function(qwen.attention, "causal_attention",                  # noqa: E731
                                 lambda q, k, v, scale, past=0, block=128: q.to(v.dtype))
    return {"projections": linears, "output layer": logits, "delta rule": rule, "conv": conv, "norms": norms,
            "attention": attention}


def child_ablate(path, variant, out, rounds):
    """CPU seconds of one decode step (after a 32-token prompt), whole and with each part replaced by a
    stand-in (`_stand_ins`), alternated `rounds` times, the best of each: what the step saves without a
    part is what the part costs where it runs, caches and allocator as they are then. CPU seconds, not
    wall: with 1 thread they barely move with the machine's load, where wall time on a shared machine
    doubles."""
    import contextlib
    import torch
    model = _build(path, variant)
    parts = _stand_ins(model)
    runs = {name: [] for name in ["whole step", *parts]}
    with torch.inference_mode():
        cache, token = _warm_decode(model)
        for _ in range(rounds):
            for name in runs:
                with parts[name]() if name in parts else contextlib.nullcontext():
                    start = time.process_time()
                    model(token, cache=cache, last=True)
                    runs[name].append(time.process_time() - start)
    out.write_text(json.dumps({name: min(v) for name, v in runs.items()}))   # the least disturbed run of each


def ablation(path, variants, threads, rounds):
    print(f"\n== where one decode step goes, by ablation ({threads} thread(s); CPU seconds, best of {rounds} "
          f"alternated rounds; load {os.getloadavg()[0]:.1f}) ==")
    for variant, env in [(v, LEARNER_ENV) for v in variants] + [(variants[0], ENV)]:
        r, _ = run_child("ablate", path, variant, threads, rounds, env=env)
        whole = r.pop("whole step")
        pinned = (" (allocator pinned: mmap threshold 1 MiB, trim 256 MiB)" if env is ENV
                  else " (glibc's allocator as a learner runs it)")
        print(f"\n{variant}{pinned}: whole step {whole * 1e3:.1f} ms CPU")
        for name, sec in r.items():
            print(f"  without {name:<28}{sec * 1e3:>8.1f} ms: the part costs {(whole - sec) * 1e3:>7.1f} ms "
                  f"{(whole - sec) / whole:>6.1%}")
        rest = whole - sum(whole - sec for sec in r.values())
        print(f"  {'rest (Python, dispatch, small ops)':<36}{'':>8}   {rest * 1e3:>19.1f} ms {rest / whole:>6.1%}")


def child_kernels(path, dtype_name, out, rounds):
    """1-row matrix products as a decode step makes them, each way torch offers: seconds (wall and
    CPU) and GB read per wall second (with 2 threads a product on one thread and one on both can
    cost the same CPU seconds; the wall clock tells them apart).

    The weights are random, of the real shapes: the projections of 12 layers (1 GB in fp32) and the
    output layer (1 GB), each in two storage layouts with the same values: (out, in) as loaded, and
    (in, out) seen as (out, in) through .t() (what F.linear is given is the same matrix). Alternated
    `rounds` times, the best of each, beside torch.sum's read rate over 1 GiB."""
    import torch
    import torch.nn.functional as F
    from engine import products
    from qwen.config import Config
    cfg = Config.load(path)
    dtype = getattr(torch, dtype_name)
    g = torch.Generator().manual_seed(0)
    hidden, inter = cfg.hidden_size, cfg.intermediate_size
    conv = 2 * cfg.linear_num_key_heads * cfg.linear_key_head_dim + cfg.linear_num_value_heads * cfg.linear_value_head_dim
    value = cfg.linear_num_value_heads * cfg.linear_value_head_dim
    inner, kv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    nv = cfg.linear_num_value_heads
    layer = {"linear_attention": [(conv, hidden), (value, hidden), (nv, hidden), (nv, hidden), (hidden, value)],
             "full_attention": [(2 * inner, hidden), (kv, hidden), (kv, hidden), (hidden, inner)]}
    mlp = [(inter, hidden), (inter, hidden), (hidden, inter)]
    shapes = [s for kind in cfg.layer_types[:12] for s in layer[kind] + mlp]
    sets = {"projections": shapes, "output layer": [(cfg.vocab_size, hidden)]}
    ways = {"F.linear": lambda x, w: F.linear(x, w), "torch.mv": lambda x, w: torch.mv(w, x.view(-1)),
            "torch.mm(w, x^T)": lambda x, w: torch.mm(w, x.view(-1, 1))}
    if dtype == torch.float32 and products.onednn_available():
        ways["products.linear (decoding: oneDNN)"] = products.linear     # small weights: F.linear, as decoding
    if dtype == torch.bfloat16:
        ways["fp32 copy, then F.linear"] = lambda x, w: F.linear(x.float(), w.float())
    result = {}
    with torch.inference_mode():
        for part, shapes in sets.items():
            loaded = [(torch.randn(o, i, generator=g) * 0.02).to(dtype) for o, i in shapes]
            xs = {i: torch.randn(1, 1, i, generator=g).to(dtype) for _, i in shapes}
            runs = {name: [] for name in ways}
            for r in range(rounds):
                for name, fn in ways.items():
                    start = _clock()
                    for w in loaded:
                        fn(xs[w.shape[1]], w)
                    runs[name].append(_clock(start))
            if dtype == torch.bfloat16 and _packs_bf16():                  # oneDNN's bf16 product wants the weight in
                name = "oneDNN, weight packed once (a copy)"             # its own blocked layout: F.linear reorders it
                packed = [torch.ops.mkldnn._reorder_linear_weight(w, 1) for w in loaded]   # at every call
                runs[name] = []
                for r in range(rounds):
                    start = _clock()
                    for w in packed:
                        torch.ops.mkldnn._linear_pointwise(xs[w.shape[1]].view(1, -1), w, None, "none", [], "")
                    runs[name].append(_clock(start))
                del packed
            stored = [w.t().contiguous().t() for w in loaded]            # (in, out) storage, the same values
            del loaded
            runs["F.linear, weight stored (in, out)"] = []
            for r in range(rounds):
                start = _clock()
                for w in stored:
                    F.linear(xs[w.shape[1]], w)
                runs["F.linear, weight stored (in, out)"].append(_clock(start))
            nbytes = sum(w.nbytes for w in stored)
            del stored
            result[part] = {name: dict(wall=min(v)[0], cpu=min(v)[1], gb_s=nbytes / min(v)[0] / 1e9)
                            for name, v in runs.items()}
            result[part]["GB"] = nbytes / 1e9
        x = torch.ones(1 << 28)
        x.sum()
        sums = []
        for _ in range(rounds):
            start = _clock()
            x.sum()
            sums.append(_clock(start))
        result["sum_gb_s"] = x.nbytes / min(sums)[0] / 1e9
    out.write_text(json.dumps(result))


def _packs_bf16():
    """Whether this torch can pack a bf16 weight for oneDNN and multiply by it, with F.linear's numbers."""
    import torch
    import torch.nn.functional as F
    try:
        w, x = torch.randn(64, 32).bfloat16(), torch.randn(1, 32).bfloat16()
        packed = torch.ops.mkldnn._reorder_linear_weight(w, 1)
        return torch.equal(torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], ""), F.linear(x, w))
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


def _clock(start=None):
    """(wall, CPU) seconds now, or since `start` (an earlier _clock())."""
    now = (time.perf_counter(), time.process_time())
    return now if start is None else (now[0] - start[0], now[1] - start[1])


def kernels(path, dtypes, threads, rounds):
    print(f"\n== 1-row products, each way torch offers ({threads} thread(s); wall and CPU seconds, best of {rounds} "
          f"alternated; random weights of the real shapes; load {os.getloadavg()[0]:.1f}) ==")
    for dtype in dtypes:
        r, _ = run_child("kernels", path, dtype, threads, rounds, env=LEARNER_ENV)
        print(f"{dtype}: torch.sum reads {r.pop('sum_gb_s'):.1f} GB/s")
        for part, ways in r.items():
            gb = ways.pop("GB")
            for name, v in ways.items():
                print(f"  {part:<14}{name:<37}{v['wall'] * 1e3:>7.1f} ms ({v['cpu'] * 1e3:>6.1f} CPU ms) for "
                      f"{gb:.2f} GB = {v['gb_s']:>5.1f} GB/s")


def child_decode(path, variant, out):
    """Load (and quantize), prefill PROMPT tokens, decode NEW: speeds, tokens, RSS once built."""
    from qwen.generate import generate_ids
    from engine.quantized import weight_bytes
    start = time.perf_counter()
    model = _build(path, variant)
    built = time.perf_counter() - start
    rss = _rss_now_mb()
    stats = {}
    tokens = list(generate_ids(model, _ids(PROMPT, 2)[0].tolist(), max_new_tokens=NEW + 1, stats=stats))
    out.write_text(json.dumps(dict(build_s=built, rss_built=rss, prefill_s=stats["prefill_s"],
                                   decode_s=stats["decode_s"], tokens=tokens, weight_bytes=weight_bytes(model))))


def _peak_since_reset():
    """Reset this process's peak RSS (Linux: clear_refs 5); returns a function giving the MB it rose by."""
    def status(key):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1]) / 1024
        return float("nan")
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return lambda: float("nan")
    before = status("VmRSS:")
    return lambda: status("VmHWM:") - before


def child_prompt(path, dtype_name, out, rounds):
    """Prefill seconds of PROMPT tokens (to the first new token) through generate_ids, as a learner's run
    reads a prompt: fp32 ("plain"), or bf16 inside engine.products.fast(), whose kernel computes its
    projections in fp32 (engine/upcast.py: "upcast"), and, with rounds > 0, also with bf16's own matmuls
    ("plain"). Wall and CPU seconds, and the peak RSS each pass adds (after a short warm-up prompt, so the
    weights' pages are resident)."""
    import torch
    from engine import upcast
    from engine.products import fast
    from qwen.generate import generate_ids
    model = _build(path, dtype_name)
    next(generate_ids(model, _ids(16, 1)[0].tolist(), max_new_tokens=1))   # warm-up: every weight read once
    ids = _ids(PROMPT, 2)[0].tolist()
    upcasts = dtype_name == "bfloat16" and upcast.emulated_bf16()
    passes = ([("upcast", fast)] if upcasts else []) + ([("plain", contextlib.nullcontext)] if rounds or not upcasts else [])
    result = {}
    for name, context in passes:
        stats, rose, cpu = {}, _peak_since_reset(), time.process_time()
        with context():
            next(generate_ids(model, ids, max_new_tokens=1, stats=stats))
        result[name] = dict(wall=stats["prefill_s"], cpu=time.process_time() - cpu, peak_mb=rose())
    out.write_text(json.dumps(result))


def prompt_pass(path, threads, rounds):
    """fp32 and bf16 in fresh processes, alternated `rounds` times (bf16's own matmuls once: 4-9x slower)."""
    runs = {"fp32": [], "bf16 upcast": [], "bf16 plain": []}
    for r in range(rounds):
        runs["fp32"].append(run_child("prompt", path, "float32", threads, 0, env=LEARNER_ENV)[0]["plain"])
        bf16 = run_child("prompt", path, "bfloat16", threads, int(r == 0), env=LEARNER_ENV)[0]
        runs["bf16 upcast"].append(bf16["upcast"])
        runs["bf16 plain"] += [bf16["plain"]] if "plain" in bf16 else []
    best = {k: {m: min(x[m] for x in v) for m in ("wall", "cpu")} | {"peak_mb": max(x["peak_mb"] for x in v)}
            for k, v in runs.items()}
    print(f"\n== the bf16 prompt pass ({threads} threads; prefill {PROMPT} tokens through generate_ids; fresh processes, "
          f"alternated, best of {rounds} (bf16's own matmuls: 1); glibc's allocator as a learner runs it; "
          f"load {os.getloadavg()[0]:.1f}) ==")
    base = best["fp32"]
    for name, label in (("fp32", "fp32"), ("bf16 plain", "bf16, bf16's own matmuls"),
                        ("bf16 upcast", "bf16 as generate_ids reads it (upcast)")):
        b = best[name]
        print(f"  {label:<40}{b['wall']:>8.2f} s {PROMPT / b['wall']:>7.1f} tokens/s {b['wall'] / base['wall']:>6.2f}x "
              f"fp32's time   CPU {b['cpu']:>7.2f} s {b['cpu'] / base['cpu']:>6.2f}x   peak RSS +{b['peak_mb']:.0f} MB")
    return [("bf16 prompt pass (generate_ids) / fp32's (time, x)", best["bf16 upcast"]["wall"] / base["wall"], 1.3, "<="),
            ("bf16 prompt pass (generate_ids) / fp32's (CPU s, x)", best["bf16 upcast"]["cpu"] / base["cpu"], 1.3, "<=")]


def breakdown(path, variants, threads):
    bw, _ = run_child("bandwidth", path, "float32", threads, env=LEARNER_ENV)
    print(f"\n== where one decode step goes ({threads} threads; after a 32-token prompt; 16 steps each; glibc's "
          f"allocator as a learner runs it, and pinned for {variants[0]}) ==")
    print(f"this machine's read bandwidth (torch.sum over 1 GiB fp32, median of 7): {bw['gb_s']:.1f} GB/s")
    rows = []
    for variant, env in [(v, LEARNER_ENV) for v in variants] + [(variants[0], ENV)]:
        r, _ = run_child("breakdown", path, variant, threads, env=env)
        total, parts = r["timed_total"], r["parts"]
        pinned = " (allocator pinned: mmap threshold 1 MiB)" if env is ENV else ""
        print(f"\n{variant}{pinned}: step {r['plain'] * 1e3:.1f} ms (timed part by part: {total * 1e3:.1f} ms); "
              f"weights read {r['weight_bytes'] / 1e9:.2f} GB, of which the output layer {r['output_bytes'] / 1e9:.2f} GB")
        for name, sec in parts.items():
            print(f"  {name:<34}{sec * 1e3:>8.1f} ms {sec / total:>6.1%}")
        rest = total - sum(parts.values())
        print(f"  {'rest: Python, dispatch, small ops':<34}{rest * 1e3:>8.1f} ms {rest / total:>6.1%}")
        print(f"  {r['ops']} aten ops a step x {r['tiny_op'] * 1e6:.1f} us for a tiny one (torch.add of two 1-element "
              f"tensors) = {r['ops'] * r['tiny_op'] * 1e3:.1f} ms of dispatch, at the least")
        reached = r["weight_bytes"] / r["plain"] / 1e9
        out_bw = r["output_bytes"] / parts["output layer"] / 1e9
        print(f"  bandwidth reached: {reached:.1f} GB/s = {reached / bw['gb_s']:.2f} of the measured {bw['gb_s']:.1f}; "
              f"the output layer alone {out_bw:.1f} GB/s; the step's bound at the measured bandwidth: "
              f"{r['weight_bytes'] / bw['gb_s'] / 1e6:.0f} ms")
        rows.append((variant, reached / bw["gb_s"]))
    return rows


# llama.cpp's figures as goals (2 threads, a quiet machine; bench/bench_llamacpp.py measures them live):
# (decode ms / token, peak RSS MB) of the same bits
LLAMA_GOAL = {"int8": ("q8_0", 45, 1000), "int4": ("q4_k_m", 37, 900)}


def quantized(path, threads, repeat):
    """fp32, bf16, int8, int4: fresh processes, alternated; best speeds, largest peak RSS; each decode step
    against its bound (the weights read per token at this machine's measured read bandwidth)."""
    bw, _ = run_child("bandwidth", path, "float32", threads, env=LEARNER_ENV)
    runs = {v: [] for v in VARIANTS}
    for _ in range(repeat):
        for variant in VARIANTS:
            runs[variant].append(run_child("decode", path, variant, threads, env=LEARNER_ENV))
    print(f"\n== quantized decoding ({threads} threads; prefill {PROMPT} tokens, decode {NEW}; fresh processes, "
          f"alternated, best of {repeat}; glibc's allocator as a learner runs it; load now {os.getloadavg()[0]:.1f}) ==")
    print(f"{'':10}{'weights GB':>11}{'prefill tok/s':>15}{'decode tok/s':>14}{'ms/token':>10}{'bound ms':>10}"
          f"{'x bound':>9}{'x fp32':>8}{'peak RSS MB':>13}{'RSS loaded MB':>15}{'greedy = fp32':>15}")
    base = None
    ref = runs["float32"][0][0]["tokens"]
    goals = []
    for variant, results in runs.items():
        prefill = PROMPT / min(r["prefill_s"] for r, _ in results)
        decode = NEW / min(r["decode_s"] for r, _ in results)
        base = base or decode
        first = results[0][0]
        bound = first["weight_bytes"] / (bw["gb_s"] * 1e9) * 1e3          # ms a step cannot beat
        peak = max(rss for _, rss in results)
        same = next((i for i, (a, b) in enumerate(zip(first["tokens"], ref)) if a != b), len(ref))
        print(f"{variant:10}{first['weight_bytes'] / 1e9:>11.2f}{prefill:>15.1f}{decode:>14.2f}{1e3 / decode:>10.1f}"
              f"{bound:>10.1f}{bound * decode / 1e3:>8.2f}x{decode / base:>7.2f}x{peak:>13.0f}"
              f"{max(r['rss_built'] for r, _ in results):>15.0f}{same:>9} of {len(ref)}")
        if variant in LLAMA_GOAL:
            goals.append((variant, decode, peak))
    print(f"(random weights: the greedy agreement says little about quality; bound = weights read per token / "
          f"{bw['gb_s']:.1f} GB/s, this machine's read bandwidth measured now;\n RSS loaded: once built and quantized, "
          "before the prompt; int8 / int4 are read from the file and quantized a block of rows at a time)")
    for variant, decode, peak in goals:
        name, ms, rss = LLAMA_GOAL[variant]
        print(f"{variant} against llama.cpp {name} (2 threads, quiet; not measured here): decode "
              f"{ms / (1e3 / decode):.2f}x its tokens/s ({1e3 / decode:.1f} ms against {ms}; goal >= 0.9x), peak RSS "
              f"{peak:.0f} MB against {rss} MB (goal: at most)")


# --------------------------------------------------------------------------------------------- parent

LEARNER_ENV = {k: v for k, v in ENV.items() if not k.startswith("MALLOC_")}   # glibc's defaults, as a learner runs


def run_child(kind, path, dtype, threads, rounds=1, env=ENV):
    """Run one measurement in a fresh process; its JSON result and its peak RSS in MB."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        argv = [sys.executable, __file__, "--child", kind, "--path", str(path), "--dtype", dtype,
                "--out", str(out), "--threads", str(threads), "--rounds", str(rounds)]
        p = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(p.pid, 0)
        err = p.stderr.read().decode()
        p.stderr.close()
        if status != 0:
            raise SystemExit(f"{kind} {dtype} failed:\n{err[-3000:]}")
        return json.loads(out.read_text()), usage.ru_maxrss / 1024


def best_of(runs):
    """The fastest load (the least disturbed by other processes) and the largest RSS of repeated runs."""
    best = dict(runs[0][0])
    best["first_token_s"] = min(r["first_token_s"] for r, _ in runs)
    return best, max(rss for _, rss in runs)


def compare(path, dtype, threads, repeat, rounds):
    runs = {"ours": [], "hf": []}
    for _ in range(repeat):                                   # alternated, so both see the same machine
        for kind in runs:
            runs[kind].append(run_child(kind, path, dtype, threads))
    (ours, ours_rss), (hf, hf_rss) = best_of(runs["ours"]), best_of(runs["hf"])
    speed, _ = run_child("speed", path, dtype, threads, rounds)
    (o_prefill, o_decode), (h_prefill, h_decode) = speed["best"]["ours"], speed["best"]["hf"]
    print(f"\n== {dtype}, {threads} threads: load (best of {repeat} fresh processes each); prefill {PROMPT} tokens, "
          f"decode {NEW} tokens (one process, alternated, best of {rounds}) ==")
    print(f"{'':34}{'ours':>12}{'transformers':>14}{'ratio':>9}")
    rows = [("load -> first token (s)", ours["first_token_s"], hf["first_token_s"], hf["first_token_s"] / ours["first_token_s"]),
            ("prefill (tokens/s)", PROMPT / o_prefill, PROMPT / h_prefill, h_prefill / o_prefill),
            ("decode (tokens/s)", NEW / o_decode, NEW / h_decode, h_decode / o_decode),
            ("peak RSS (MB)", ours_rss, hf_rss, hf_rss / ours_rss)]
    for name, a, b, r in rows:
        print(f"{name:34}{a:>12.2f}{b:>14.2f}{r:>8.2f}x")
    budget = (ours["weights"] + ours["cache"] + ours["logits"]) / 2**20
    torch_rss = min(measure(python("import torch"), 1)[1] for _ in range(3))   # a process that only imports torch
    print(f"weights {ours['weights'] / 2**20:.0f} MB + cache {ours['cache'] / 2**20:.1f} MB + logits "
          f"{ours['logits'] / 2**20:.1f} MB = {budget:.0f} MB; peak RSS / that = {ours_rss / budget:.3f}; "
          f"above `import torch` ({torch_rss:.0f} MB): {(ours_rss - torch_rss) / budget:.3f} "
          f"(transformers: {(hf_rss - torch_rss) / budget:.3f})")
    same = next((i for i, (a, b) in enumerate(zip(speed["tokens"], speed["ref_tokens"])) if a != b),
                len(speed["ref_tokens"]))
    print(f"greedy tokens equal to transformers' before the first difference: {same} of {len(speed['ref_tokens'])}"
          + ("" if dtype != "bfloat16" else " (random weights: near-ties, which rounding in bf16 can flip)"))
    return [(f"{dtype}: prefill speed vs transformers (x, higher is better)", rows[1][3], 1.0, ">="),
            (f"{dtype}: decode speed vs transformers (x, higher is better)", rows[2][3], 1.0, ">="),
            (f"{dtype}: load->first token, transformers / ours", rows[0][3], 1.0, ">="),
            (f"{dtype}: (peak RSS - import torch) / (weights + cache + logits)", (ours_rss - torch_rss) / budget,
             1.15, "<=")]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keep", help="write (or reuse) the full-size checkpoint here")
    p.add_argument("--threads", type=int, default=0, help="torch threads for both sides (default: torch's)")
    p.add_argument("--dtypes", default="float32,bfloat16", help="compute dtypes compared with transformers")
    p.add_argument("--repeat", type=int, default=2, help="fresh processes per side for load and RSS, alternated")
    p.add_argument("--rounds", type=int, default=3, help="alternated prefill + decode runs per side, in one process")
    p.add_argument("--skip-context", action="store_true",
                   help="leave out our fp32 decode time per token at 256, 1024 and 4096 tokens of context")
    p.add_argument("--skip-fidelity", action="store_true",
                   help="leave out fp32 logits and 32 greedy tokens against transformers")
    p.add_argument("--skip-compare", action="store_true", help="leave out the comparison with transformers")
    p.add_argument("--skip-breakdown", action="store_true",
                   help="leave out where one decode step goes, part by part, and the bandwidth it reaches")
    p.add_argument("--skip-quant", action="store_true",
                   help="leave out quantized decoding: fp32, bf16, int8 and int4 models (qwen/quant.py)")
    p.add_argument("--skip-prompt", action="store_true",
                   help="leave out the bf16 prompt pass (engine/upcast.py) against fp32's")
    p.add_argument("--skip-ablation", action="store_true",
                   help="leave out where one decode step goes, by ablation (CPU seconds)")
    p.add_argument("--skip-kernels", action="store_true",
                   help="leave out the 1-row products, each way torch offers: F.linear, torch.mv, torch.mm(w, x^T), "
                        "oneDNN as decoding runs it (engine/products.py); fp32 and bf16")
    p.add_argument("--ablation-rounds", type=int, default=9,
                   help="alternated rounds of the decode-step ablation and of the 1-row products")
    p.add_argument("--breakdown", default="float32,int8", help="variants whose decode step is broken down: "
                                                          "float32, bfloat16, int8, int4")
    for internal in ("--child", "--path", "--dtype", "--out"):               # how the bench starts its children
        p.add_argument(internal, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        import torch
        if args.threads:
            torch.set_num_threads(args.threads)
        out = Path(args.out)
        from engine.products import fast
        speed = contextlib.nullcontext() if args.child == "prompt" else fast()   # as a chapter runs the model
        with speed:
            run = {"ours": lambda: child_ours(args.path, args.dtype, out), "hf": lambda: child_hf(args.path, args.dtype, out),
             "fidelity": lambda: child_fidelity(args.path, out), "context": lambda: child_context(args.path, out),
             "speed": lambda: child_speed(args.path, args.dtype, out, args.rounds),
             "bandwidth": lambda: child_bandwidth(out), "breakdown": lambda: child_breakdown(args.path, args.dtype, out),
             "decode": lambda: child_decode(args.path, args.dtype, out),
             "ablate": lambda: child_ablate(args.path, args.dtype, out, args.rounds),
             "kernels": lambda: child_kernels(args.path, args.dtype, out, args.rounds),
             "prompt": lambda: child_prompt(args.path, args.dtype, out, args.rounds)}[args.child]
            run()
        return

    threads = args.threads or int(subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                                                 capture_output=True, text=True, env=ENV).stdout)
    path = full_checkpoint(args.keep)
    print(f"machine load before: {os.getloadavg()[0]:.2f} (1-minute average), {os.cpu_count()} CPUs", flush=True)
    targets = []
    if not args.skip_breakdown:
        breakdown(path, args.breakdown.split(","), threads)
    if not args.skip_ablation:
        ablation(path, args.breakdown.split(","), threads, args.ablation_rounds)
    if not args.skip_kernels:
        kernels(path, ["float32", "bfloat16"], threads, args.ablation_rounds)
    if not args.skip_quant:
        quantized(path, threads, args.repeat)
    if not args.skip_prompt:
        targets += prompt_pass(path, threads, args.rounds)
    for dtype in ([] if args.skip_compare else args.dtypes.split(",")):
        targets += compare(path, dtype, threads, args.repeat, args.rounds)
    if not args.skip_fidelity:
        fid, _ = run_child("fidelity", path, "float32", threads)
        print(f"\n== fidelity on the full-size checkpoint (fp32) ==\nlogits over 32 tokens: max |ours - transformers| = "
              f"{fid['max_abs_diff']:.2e} (largest logit {fid['logit_scale']:.2f}); 32 greedy tokens identical: "
              f"{fid['greedy_equal']}")
        targets += [("fp32 logits: max abs difference to transformers", fid["max_abs_diff"], 1e-4, "<="),
                    ("fp32 greedy 32 tokens identical (1 = yes)", float(fid["greedy_equal"]), 1.0, ">=")]
    if not args.skip_context:
        ctx, _ = run_child("context", path, "float32", threads)
        print("\n== our decode time per token by context (fp32; cache filled to that length) ==")
        print(f"{'context':>8}{'ms/token':>10}{'cache MB':>10}")
        for n, row in ctx.items():
            print(f"{n:>8}{row['ms']:>10.1f}{row['cache'] / 2**20:>10.1f}")
    print(f"\nmachine load after: {os.getloadavg()[0]:.2f} (1-minute average)")
    ok = True
    for text, value, limit, sense in targets:
        passed = value >= limit if sense == ">=" else value <= limit
        ok &= passed
        print(f"{'PASS' if passed else 'FAIL'}  {text:<58} {value:>10.3g}  (target {sense} {limit})")
    if not args.keep:
        import shutil
        shutil.rmtree(path, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
