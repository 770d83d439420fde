"""Our model against llama.cpp (and transformers), side by side, on the full-size checkpoint.

What a learner who wants Qwen3.5-0.8B to talk on a laptop CPU compares: llama.cpp through
llama-cpp-python, on the same checkpoint, converted by the `convert_hf_to_gguf.py` that ships
inside llama-cpp-python's source distribution (the llama.cpp it was built from):

  ours          fp32, bf16 (load_model), int8, int4 (qwen.quant.quantize_model, from the stored bf16)
  transformers  fp32, bf16 (Qwen3_5ForCausalLM.from_pretrained)
  llama.cpp     f32, bf16 (convert_hf_to_gguf.py --outtype f32 / bf16), q8_0, q4_k_m (quantized from
                the bf16 file with llama_cpp's llama_model_quantize binding)

The checkpoint has the real 0.8B inventory with random values (bench/common.py); the converter
reads it from a temp folder of links, with the tokenizer files it needs (the real vocabulary),
and leaves out the MTP block (--no-mtp): our decoding does not load it either. The GGUF files
are kept beside a --keep checkpoint (DIR/gguf), so a second run converts nothing.

Each contender runs in its own fresh process: load (and quantize), a warm-up (a 16-token prompt,
2 new tokens: the weights' pages and one-time setup are then paid), then greedy decoding of a
PROMPT-token prompt (the same random ids for all, below the special tokens) and NEW more tokens,
through its own generation loop (ours: generate_ids; transformers: generate() timed by a streamer;
llama.cpp: Llama.generate with temp 0). Measured: prefill = prompt to the first new token (s),
decode = the median of the NEW one-token steps (ms), and the process's peak RSS (the kernel's
ru_maxrss: all of it, load and warm-up included). Same threads for all (torch.set_num_threads,
llama.cpp's n_threads / n_threads_batch, OMP_NUM_THREADS). The contenders are alternated in
`--rounds` rounds (each goal's pair next to each other in time, transformers last), and the table shows the
median over rounds (RSS: the largest), with each round's decode beside it: this machine is
shared, and one number alone means little; the load is printed before and after.

glibc's allocator runs as a learner gets it (no MALLOC_* settings); --pinned runs every contender
with bench/common.py's pinned thresholds instead, as bench_model.py's timings do.

Then each goal as one line, its ratio and met / missed; the exit status is 1 when one
is missed (as bench_model.py's targets). Without llama-cpp-python: one line on how to get it, exit 0.

    python bench/bench_llamacpp.py [--keep DIR] [--sdist llama_cpp_python-X.tar.gz] [--threads 2]
                                   [--rounds 3] [--only ours-fp32,llama-f32] [--pinned] [--quick]
"""
import argparse
import importlib.metadata
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import ENV, ROOT, full_checkpoint  # noqa: E402

sys.path.insert(0, str(ROOT))
from qwen.lang import T  # noqa: E402  (light: no torch in this parent process)

PROMPT, NEW, ROUNDS = 512, 64, 3
QUICK = dict(prompt=64, new=8, rounds=1)              # --quick: a smoke run
WARM = 16                                             # warm-up prompt length (2 new tokens)
ID_LIMIT = 248000                                     # prompt ids below this: ordinary tokens, no specials
LEARNER_ENV = {k: v for k, v in ENV.items() if not k.startswith("MALLOC_")}   # glibc's defaults

# key: (table row, side, variant); in the order they run in a round: each goal's pair next to each other,
# then transformers (a reference, in no goal: under load its bf16 decode is by far the slowest)
CONTENDERS = {
    "ours-fp32": ("ours fp32", "ours", "float32"),
    "llama-f32": ("llama.cpp f32", "llama", "f32"),
    "ours-bf16": ("ours bf16", "ours", "bfloat16"),
    "llama-bf16": ("llama.cpp bf16", "llama", "bf16"),
    "ours-int8": ("ours int8", "ours", "int8"),
    "llama-q8_0": ("llama.cpp q8_0", "llama", "q8_0"),
    "ours-int4": ("ours int4", "ours", "int4"),
    "llama-q4_k_m": ("llama.cpp q4_k_m", "llama", "q4_k_m"),
    "hf-fp32": ("transformers fp32", "hf", "float32"),
    "hf-bf16": ("transformers bf16", "hf", "bfloat16"),
}
TABLE_ORDER = ("ours-fp32", "hf-fp32", "llama-f32", "ours-bf16", "hf-bf16", "llama-bf16",
               "ours-int8", "llama-q8_0", "ours-int4", "llama-q4_k_m")
CONVERTED = ("f32", "bf16")                           # convert_hf_to_gguf.py --outtype
QUANTIZED = {"q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0", "q4_k_m": "LLAMA_FTYPE_MOSTLY_Q4_K_M"}   # from the bf16 file
CONVERTER = "vendor/llama.cpp/convert_hf_to_gguf.py"  # inside the sdist

# the goals: (name, kind, ours, theirs, limit); decode: ours tokens/s / theirs >= limit,
# rss: ours / theirs <= limit, prefill: ours bf16 seconds / ours fp32 seconds <= limit
GOALS = (("fp32 decode", "decode", "ours-fp32", "llama-f32", 0.9),
         ("bf16 decode", "decode", "ours-bf16", "llama-bf16", 0.9),
         ("int8 decode", "decode", "ours-int8", "llama-q8_0", 0.9),
         ("int4 decode", "decode", "ours-int4", "llama-q4_k_m", 0.9),
         ("int8 peak RSS", "rss", "ours-int8", "llama-q8_0", 1.0),
         ("int4 peak RSS", "rss", "ours-int4", "llama-q4_k_m", 1.0),
         ("bf16 prefill", "prefill", "ours-bf16", "ours-fp32", 1.3))


# --------------------------------------------------------------------------------------------- pure parts

def skip_line():
    """The one line printed where llama-cpp-python is not installed."""
    return T("llama-cpp-python is not installed, so there is nothing to compare with: pip install llama-cpp-python "
             "(it builds llama.cpp from source, 15-25 minutes on 2 cores), or pip install -e \".[bench]\". Skipped.",
             "没有安装 llama-cpp-python，无从比较：pip install llama-cpp-python（它从源码编译 llama.cpp，"
             "2 个核心上要 15-25 分钟），或 pip install -e \".[bench]\"。已跳过。")


def has_llama_cpp():
    """Whether llama_cpp can be imported (found, not imported: this parent process stays small)."""
    return importlib.util.find_spec("llama_cpp") is not None


def prompt_ids(n, seed=2):
    """n random token ids below the special tokens, the same for every contender (no torch needed)."""
    import random
    rng = random.Random(seed)
    return [rng.randrange(ID_LIMIT) for _ in range(n)]


def find_converter(sdist, workdir):
    """convert_hf_to_gguf.py inside llama-cpp-python's sdist: an extracted folder, or the .tar.gz
    (extracted once into workdir)."""
    sdist = Path(sdist)
    if sdist.is_dir():
        found = [sdist / CONVERTER] + sorted(sdist.glob("*/" + CONVERTER))
    elif sdist.is_file() and sdist.name.endswith((".tar.gz", ".tgz")):
        target = Path(workdir) / sdist.name.split(".tar.gz")[0].split(".tgz")[0]
        if not (target / CONVERTER).is_file():
            with tempfile.TemporaryDirectory(dir=workdir) as tmp:
                with tarfile.open(sdist) as tar:
                    tar.extractall(tmp, filter="data")
                tops = [p for p in Path(tmp).iterdir() if (p / CONVERTER).is_file()]
                if not tops:
                    raise SystemExit(f"{sdist}: no {CONVERTER} inside: is it llama-cpp-python's source distribution?")
                shutil.rmtree(target, ignore_errors=True)
                tops[0].rename(target)
        found = [target / CONVERTER]
    else:
        raise SystemExit(f"--sdist {sdist}: give llama-cpp-python's source distribution (.tar.gz) or its extracted folder")
    found = [f for f in found if f.is_file()]
    if not found:
        raise SystemExit(f"--sdist {sdist}: no {CONVERTER} there: is it llama-cpp-python's source distribution?")
    return found[0]


def sdist_download_argv(version, dest):
    """pip's command that fetches the sdist of the installed llama-cpp-python (the converter is not in the wheel)."""
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
            f"llama-cpp-python=={version}", "-d", str(dest)]


def converter_folder(checkpoint, folder):
    """A folder the converter reads: links to the checkpoint's weights, copies of its small files, and
    tokenizer.json / tokenizer_config.json (the real vocabulary, engine/tiny.py) where the checkpoint has none:
    the converter builds the GGUF's vocabulary with transformers' AutoTokenizer. The checkpoint is not touched."""
    checkpoint, folder = Path(checkpoint), Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for f in sorted(checkpoint.iterdir()):
        if not f.is_file():
            continue
        if f.name.endswith(".safetensors"):
            (folder / f.name).symlink_to(f.resolve())
        else:
            shutil.copyfile(f, folder / f.name)
    if not (folder / "tokenizer.json").is_file() or not (folder / "tokenizer_config.json").is_file():
        from engine.tiny import write_tokenizer_files
        write_tokenizer_files(folder)
    return folder


def converter_argv(converter, folder, outfile, outtype):
    """The converter's command line: one GGUF of `outtype`, without the MTP block."""
    return [sys.executable, str(converter), str(folder), "--outfile", str(outfile), "--outtype", outtype, "--no-mtp"]


def gguf_plan(needed, have):
    """(outtypes to convert, variants to quantize) for the llama.cpp variants needed, given those already on
    disk: q8_0 / q4_k_m are quantized from the bf16 file, which is converted for them if it is not there."""
    quantize = [v for v in QUANTIZED if v in needed and v not in have]
    sources = {v for v in needed if v in CONVERTED} | ({"bf16"} if quantize else set())
    return [v for v in CONVERTED if v in sources and v not in have], quantize


def summarize(runs):
    """One contender's rounds [(result, peak RSS MB)] -> medians (prefill s, decode ms), largest RSS, each round's decode."""
    decodes = [statistics.median(r["steps_ms"]) for r, _ in runs]
    return dict(prefill_s=statistics.median(r["prefill_s"] for r, _ in runs), decode_ms=statistics.median(decodes),
                rss_mb=max(rss for _, rss in runs), rounds_ms=decodes)


def table_lines(rows, prompt, new):
    """The markdown table: one line per measured contender, in TABLE_ORDER."""
    lines = [f"| | prefill {prompt} (s) | decode (ms / token) | decode (tokens/s) | peak RSS (GB) | decode per round (ms) |",
             "|---|---|---|---|---|---|"]
    for key in TABLE_ORDER:
        if key in rows:
            r = rows[key]
            each = " / ".join(f"{ms:.0f}" for ms in r["rounds_ms"])
            lines.append(f"| {CONTENDERS[key][0]} | {r['prefill_s']:.2f} | {r['decode_ms']:.1f} | "
                         f"{1000 / r['decode_ms']:.2f} | {r['rss_mb'] * 2**20 / 1e9:.2f} | {each} |")
    return lines


def goal_line(goal, rows):
    """One goal: its numbers, the ratio, met / missed (or not measured); and whether it was met (None: not measured)."""
    name, kind, ours, theirs, limit = goal
    if ours not in rows or theirs not in rows:
        return f"{name}: not measured ({', '.join(k for k in (ours, theirs) if k not in rows)} left out)", None
    a, b = rows[ours], rows[theirs]
    label_a, label_b = CONTENDERS[ours][0], CONTENDERS[theirs][0]
    if kind == "decode":
        x, y, unit, sense = 1000 / a["decode_ms"], 1000 / b["decode_ms"], "tokens/s", ">="
    elif kind == "rss":
        x, y, unit, sense = a["rss_mb"] * 2**20 / 1e9, b["rss_mb"] * 2**20 / 1e9, "GB", "<="
    else:
        x, y, unit, sense = a["prefill_s"], b["prefill_s"], "s", "<="
    ratio = x / y
    met = ratio >= limit if sense == ">=" else ratio <= limit
    return (f"{name}: {label_a} {x:.2f} {unit} / {label_b} {y:.2f} {unit} = {ratio:.2f} "
            f"(goal {sense} {limit}): {'met' if met else 'missed'}"), met


def selected(only):
    """The contender keys to run: all, or those named in --only (comma-separated)."""
    if not only:
        return list(CONTENDERS)
    keys = [k.strip() for k in only.split(",") if k.strip()]
    unknown = [k for k in keys if k not in CONTENDERS]
    if unknown:
        raise SystemExit(f"--only: unknown {', '.join(unknown)}; choose from {', '.join(CONTENDERS)}")
    return [k for k in CONTENDERS if k in keys]


# --------------------------------------------------------------------------------------------- children

def _clocked(tokens):
    """Drive a token generator: (seconds to the first token, ms of each later one-token step, the tokens)."""
    begin, stamps, out = time.perf_counter(), [], []
    for t in tokens:
        stamps.append(time.perf_counter())
        out.append(int(t))
    steps = [(b - a) * 1000 for a, b in zip(stamps, stamps[1:])]
    return stamps[0] - begin, steps, out


def child_ours(path, variant, ids, new):
    from bench_model import _build
    from qwen.generate import generate_ids
    start = time.perf_counter()
    model = _build(path, variant)                             # load_model, or int8 / int4 from the stored bf16
    load = time.perf_counter() - start
    list(generate_ids(model, prompt_ids(WARM, seed=9), max_new_tokens=2))
    prefill, steps, tokens = _clocked(generate_ids(model, ids, max_new_tokens=new + 1))
    return dict(load_s=load, prefill_s=prefill, steps_ms=steps, tokens=tokens)


def child_hf(path, variant, ids, new):
    import torch
    import transformers
    from bench_model import hf_stamped

    def run(prompt, n):
        begin, times, tokens = hf_stamped(model, torch.tensor([prompt]), n)
        return times[0] - begin, [(b - a) * 1000 for a, b in zip(times, times[1:])], tokens

    transformers.logging.set_verbosity_error()
    start = time.perf_counter()
    model = transformers.Qwen3_5ForCausalLM.from_pretrained(path, dtype=getattr(torch, variant)).eval()
    load = time.perf_counter() - start
    run(prompt_ids(WARM, seed=9), 2)
    prefill, steps, tokens = run(ids, new + 1)
    return dict(load_s=load, prefill_s=prefill, steps_ms=steps, tokens=tokens)


def child_llama(gguf, ids, new, threads):
    import llama_cpp
    start = time.perf_counter()
    llm = llama_cpp.Llama(model_path=str(gguf), n_ctx=len(ids) + new + 16, n_batch=len(ids), n_ubatch=len(ids),
                          n_threads=threads, n_threads_batch=threads, verbose=False)
    load = time.perf_counter() - start

    def run(prompt, n):
        llm.reset()
        tokens = llm.generate(prompt, temp=0.0, top_k=1, repeat_penalty=1.0)
        return _clocked(next(tokens) for _ in range(n))

    run(prompt_ids(WARM, seed=9), 2)
    prefill, steps, tokens = run(ids, new + 1)
    system = llama_cpp.llama_print_system_info().decode(errors="replace").strip()
    return dict(load_s=load, prefill_s=prefill, steps_ms=steps, tokens=tokens,
                system=f"llama-cpp-python {llama_cpp.__version__}; {system}")


def child_quantize(src, dst, ftype_name, threads):
    """llama.cpp's own quantizer (llama_model_quantize), from src to dst."""
    import ctypes
    import llama_cpp
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, ftype_name)
    params.nthread = threads
    status = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if status != 0:
        raise SystemExit(f"llama_model_quantize {src} -> {dst} ({ftype_name}) returned {status}")
    return dict(status=status)


# --------------------------------------------------------------------------------------------- parent

def child_env(threads, pinned):
    env = dict(ENV if pinned else LEARNER_ENV)
    env["OMP_NUM_THREADS"] = str(threads)
    return env


def run_child(args, env):
    """One child process of this script: its JSON result and its peak RSS in MB."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        argv = [sys.executable, __file__, "--child", *map(str, args), "--out", str(out)]
        p = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            err = p.stderr.read().decode(errors="replace")  # read before waiting: a full pipe would block it
            _, status, usage = os.wait4(p.pid, 0)
        except BaseException:                               # Ctrl-C: the child goes too
            p.kill()
            p.wait()
            raise
        finally:
            p.stderr.close()
        if status != 0:
            raise SystemExit(f"{' '.join(map(str, args))} failed:\n{err[-3000:]}")
        return json.loads(out.read_text(encoding="utf-8")), usage.ru_maxrss / 1024


def sdist_path(given, workdir):
    """The sdist to take the converter from: --sdist, else one fetched by pip into workdir (once)."""
    if given:
        return Path(given)
    have = sorted(Path(workdir).glob("llama_cpp_python-*.tar.gz"))
    if have:
        return have[-1]
    version = importlib.metadata.version("llama-cpp-python")
    print(f"fetching llama-cpp-python {version}'s source distribution (for its convert_hf_to_gguf.py)", flush=True)
    subprocess.run(sdist_download_argv(version, workdir), check=True)
    return sorted(Path(workdir).glob("llama_cpp_python-*.tar.gz"))[-1]


def gguf_files(checkpoint, workdir, sdist, threads, needed, env):
    """{variant: GGUF path} for the llama.cpp variants needed, converted / quantized where not there yet.
    Each file is written under a temp name and renamed when complete, so a broken run leaves none half-written."""
    workdir.mkdir(parents=True, exist_ok=True)
    files = {v: workdir / f"qwen3.5-0.8b-{v}.gguf" for v in CONVERTED + tuple(QUANTIZED)}
    todo, quantize = gguf_plan(needed, {v for v, f in files.items() if f.is_file()})
    if todo:
        converter = find_converter(sdist_path(sdist, workdir), workdir)
        print(f"converter: {converter}", flush=True)
        with tempfile.TemporaryDirectory(dir=workdir) as tmp:
            folder = converter_folder(checkpoint, Path(tmp) / "model")
            for v in todo:
                part = files[v].with_name(files[v].name + ".part")
                start = time.perf_counter()
                done = subprocess.run(converter_argv(converter, folder, part, v), env=env, capture_output=True, text=True)
                if done.returncode != 0:
                    raise SystemExit(f"convert_hf_to_gguf.py --outtype {v} failed:\n{(done.stdout + done.stderr)[-3000:]}")
                part.rename(files[v])
                print(f"converted to {v}: {files[v].stat().st_size / 1e9:.2f} GB in {time.perf_counter() - start:.0f} s",
                      flush=True)
    for v in quantize:
        part = files[v].with_name(files[v].name + ".part")
        start = time.perf_counter()
        run_child(["quantize", "--path", files["bf16"], "--variant", QUANTIZED[v], "--gguf", part, "--threads", threads],
                  env)
        part.rename(files[v])
        print(f"quantized to {v}: {files[v].stat().st_size / 1e9:.2f} GB in {time.perf_counter() - start:.0f} s",
              flush=True)
    return files


def load_line(when):
    one, five, fifteen = os.getloadavg()
    return f"machine load {when}: {one:.2f} {five:.2f} {fifteen:.2f} (1, 5, 15-minute averages), {os.cpu_count()} CPUs"


def version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keep", help="write (or reuse) the full-size checkpoint here, and its GGUF files in DIR/gguf")
    p.add_argument("--sdist", help="llama-cpp-python's source distribution (.tar.gz or extracted folder) holding "
                                   "convert_hf_to_gguf.py (default: fetched with pip download)")
    p.add_argument("--threads", type=int, default=2, help="threads for every contender (default 2)")
    p.add_argument("--rounds", type=int, help=f"alternated rounds, fresh processes (default {ROUNDS}; --quick 1)")
    p.add_argument("--only", help="comma-separated contenders: " + ", ".join(CONTENDERS))
    p.add_argument("--pinned", action="store_true", help="pin glibc's allocator (bench/common.py ENV) in every contender")
    p.add_argument("--quick", action="store_true", help=f"a smoke run: prompt {QUICK['prompt']}, decode {QUICK['new']}, "
                                                        "1 round")
    p.add_argument("--child"), p.add_argument("--path"), p.add_argument("--variant"), p.add_argument("--gguf")
    p.add_argument("--ids"), p.add_argument("--new", type=int), p.add_argument("--out")
    args = p.parse_args()
    if args.child:
        return child_main(args)

    if not has_llama_cpp():
        print(skip_line())
        return 0
    prompt, new, rounds = (QUICK["prompt"], QUICK["new"], QUICK["rounds"]) if args.quick else (PROMPT, NEW, ROUNDS)
    rounds = args.rounds or rounds
    keys = selected(args.only)
    env = child_env(args.threads, args.pinned)
    path = full_checkpoint(args.keep)
    workdir = Path(args.keep) / "gguf" if args.keep else path / "gguf"
    try:
        return compare(path, workdir, args, keys, env, prompt, new, rounds)
    finally:
        if not args.keep:
            shutil.rmtree(path, ignore_errors=True)


def compare(path, workdir, args, keys, env, prompt, new, rounds):
    files = gguf_files(path, workdir, args.sdist, args.threads, [CONTENDERS[k][2] for k in keys if k.startswith("llama")],
                       env)
    with tempfile.TemporaryDirectory() as tmp:
        ids_file = Path(tmp) / "ids.json"
        ids_file.write_text(json.dumps(prompt_ids(prompt)), encoding="utf-8")
        print(f"\ntorch {version('torch')}, transformers "
              f"{version('transformers')}; {args.threads} thread{'' if args.threads == 1 else 's'}; prompt {prompt} tokens (random ids, the same for all), "
              f"decode {new}; {rounds} round(s), each contender in a fresh process, alternated", flush=True)
        print("allocator: " + ("pinned (MALLOC_MMAP_THRESHOLD_=1048576, MALLOC_TRIM_THRESHOLD_=268435456)" if args.pinned
                               else "glibc's defaults, as a learner runs it (no MALLOC_* settings)"), flush=True)
        print(load_line("before"), flush=True)
        runs, system = {k: [] for k in keys}, None
        try:
            for r in range(rounds):
                for k in keys:
                    _, side, variant = CONTENDERS[k]
                    target = files[variant] if side == "llama" else path
                    result = run_child([side, "--path", target, "--variant", variant, "--ids", ids_file, "--new", new,
                                        "--threads", args.threads], env)
                    runs[k].append(result)
                    system = system or result[0].get("system")
                    print(f"  round {r + 1} {CONTENDERS[k][0]:<18} prefill {result[0]['prefill_s']:6.2f} s, decode "
                          f"{statistics.median(result[0]['steps_ms']):7.1f} ms / token, peak RSS {result[1]:6.0f} MB",
                          flush=True)
        except KeyboardInterrupt:                           # Ctrl-C: the table of what was measured so far
            print(f"\ninterrupted: {sum(map(len, runs.values()))} of {rounds * len(keys)} runs done", flush=True)
            runs = {k: v for k, v in runs.items() if v}
    print(load_line("after"))
    if system:
        print(f"llama.cpp's build: {system}")
    rows = {k: summarize(v) for k, v in runs.items()}
    done = sorted({len(v) for v in runs.values()})
    print(f"\nmedians over {'-'.join(map(str, done))} round(s) (peak RSS: the largest); the weights are random, so these are speeds "
          "and sizes only\n")
    print("\n".join(table_lines(rows, prompt, new)))
    print()
    met = []
    for goal in GOALS:
        line, ok = goal_line(goal, rows)
        print(line)
        met.append(ok)
    return 1 if False in met else 0


def child_main(args):
    if args.child in ("ours", "hf"):                          # llama.cpp's processes never import torch
        import torch
        torch.set_num_threads(args.threads)
    if args.child == "quantize":
        result = child_quantize(args.path, args.gguf, args.variant, int(args.threads))
    else:
        ids = json.loads(Path(args.ids).read_text(encoding="utf-8"))
        result = {"ours": lambda: child_ours(args.path, args.variant, ids, args.new),
                  "hf": lambda: child_hf(args.path, args.variant, ids, args.new),
                  "llama": lambda: child_llama(args.path, ids, args.new, int(args.threads))}[args.child]()
    Path(args.out).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
