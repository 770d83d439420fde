"""Shared fixtures. Tests never touch the network and never write outside their temp folders.

What is built or run once per session (under xdist: once for all workers, through a file lock in the
session's folder; reuse these instead of building your own):
- `tiny_path`: the built-in tiny checkpoint (built by the controller while the workers start; they wait for it).
- `run_course(*args)`: stdout of `python main.py ARGS`, the whole course in one process (the fixtures
  `course_en` and `course_zh`: COURSE_EN and COURSE_ZH, shared by every file that reads them);
  `course_namespaces(*args)`: the plain values (numbers, flags, lists, small tensors, configs) that
  each chapter of that same run named, {chapter number: {name: value}}.
- `transformers_checkpoints`: {name: folder} of the checkpoints in TRANSFORMERS_CHECKPOINTS, each
  written by transformers itself (tests/helpers.py), once per session; `run_courses_on_checkpoints()`:
  the whole course on each, run in COURSE_EN's process after that course.
The suite's budget: under two minutes with `-n auto` on a quiet 2-core machine. A test that starts
Python (import torch alone is 1.2-3 s of CPU) or runs chapters costs the most: share a run
between the tests that read it, and run in-process where a subprocess adds nothing. Where a test
needs a process of its own, `run_script` (or `forkserver.python`) forks it from a server that has
imported torch already; start a real interpreter (subprocess) only for what needs one: signals,
what a fresh interpreter imports, variables read at start-up (forkserver falls back by itself).
"""
import gc
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

def _real_model_on_disk():
    """The learner's real Qwen3.5-0.8B, if present: $QWEN_MODEL, else their Hugging Face cache."""
    env = os.environ.get("QWEN_MODEL")
    if env and (Path(env).expanduser() / "config.json").is_file():
        return Path(env).expanduser()
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface"), "hub")
    for snap in sorted(Path(hub).glob("models--Qwen--Qwen3.5-0.8B/snapshots/*")):
        if (snap / "config.json").is_file() and list(snap.glob("*.safetensors")):
            return snap
    return None


REAL_MODEL = _real_model_on_disk()

# Before anything imports huggingface_hub (it reads these once, at import time). With pytest-xdist
# (`-n auto`) the workers share the controller's folder, so the tiny checkpoint is built once.
if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("TBH_TEST_TMP"):
    _TMP = Path(os.environ["TBH_TEST_TMP"])
else:
    _TMP = Path(tempfile.mkdtemp(prefix="tbh-tests-"))
    os.environ["TBH_TEST_TMP"] = str(_TMP)
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HOME"] = str(_TMP / "hf-home")
os.environ.pop("HF_HUB_CACHE", None)
os.environ.pop("QWEN_MODEL", None)
os.environ.pop("QWEN_PLOT", None)                      # figures only where a test asks for them
os.environ.pop("QWEN_FIGURES", None)
os.environ["QWEN_CACHE"] = str(_TMP / "qwen-cache")
os.environ["QWEN_LANG"] = "en"
# Threads: the tests compute on tiny checkpoints, work too small to split across threads (engine/threads.py),
# and `-n auto` already runs one xdist worker per core. So one torch thread per test process, set before
# torch is imported and inherited by every script a test starts. torch's default, one thread per core in
# every worker, oversubscribes the cores (a decoding test on a loaded 2-core machine ran several times
# slower). A learner's QWEN_THREADS would change what
# the chapters print.
os.environ["OMP_NUM_THREADS"] = "1"
os.environ.pop("QWEN_THREADS", None)
if "torch" in sys.modules:                        # imported by a plugin before this file: too late for the variable
    sys.modules["torch"].set_num_threads(1)
# transformers imports torch._dynamo, whose import makes <system temp>/torchinductor_<user>: in the session's folder instead
os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(_TMP / "torchinductor")

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MANIFEST = ROOT / "bench" / "qwen3.5-0.8b-manifest.json"


def _no_network(self, address, *args, **kwargs):
    host = address[0] if isinstance(address, tuple) else address
    local = getattr(socket, "AF_UNIX", None) == self.family          # e.g. multiprocessing's fork server
    if local or isinstance(host, str) and (host.startswith("127.") or host in ("localhost", "::1")):
        return _connect(self, address, *args, **kwargs)
    raise OSError(f"tests must not use the network (tried to reach {address!r})")


_connect = socket.socket.connect
socket.socket.connect = _no_network


# The garbage collector is off while the tests are collected. Collecting imports torch and transformers
# (hundreds of thousands of objects) and rewrites every assert (millions of short-lived AST nodes), and
# each full pass of the collector walked all of it again (`pytest --collect-only -n 2` takes about a
# quarter less CPU with the collector off). Freezing what is alive after (gc.freeze) saved 2 s
# more, but frozen objects are invisible to gc.get_objects(), which the hostile solutions of the judge's
# tests search: a test of what a solution can find would find less than in a learner's judge.
@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session):
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


_building = []                                   # the controller's thread that builds the tiny checkpoint


def pytest_configure(config):
    """Under xdist, the controller builds the tiny checkpoint once, in a thread, while the workers start and
    collect (~15 s of CPU each); a worker that needs it first waits for it (engine.tiny's lock). Built before
    the workers start, it would take ~10 s (torch's import, the real tokenizer's merges) with one core busy."""
    if getattr(config.option, "numprocesses", None) and not os.environ.get("PYTEST_XDIST_WORKER"):
        import threading
        from engine.tiny import tiny_model_path
        _building.append(threading.Thread(target=tiny_model_path, name="tiny checkpoint"))
        _building[0].start()


# A whole-course run (about 20 s of CPU) is the setup of the first test that reads it, and the other
# xdist worker waits for it under the file lock: on a loaded machine (load 8 on 2 cores) a run can take
# more than the 120 s that pytest-timeout gives a test. Those tests get COURSE_TIMEOUT, the run 330 s.
COURSE_FIXTURES = {"course_en", "course_zh", "courses_on_transformers_checkpoints", "chapter_run"}
COURSE_TIMEOUT = 360


# The order of the collection, for xdist (`-n N`, its default "load" scheduling): each worker's first batch is
# a run of consecutive tests, len(items) // N // 4 of them (one test each in turn when there are fewer than
# 2 N), and the rest go out in order as workers finish. The first reader of each whole course leads a
# worker's first batch, so the courses are built at once on different workers (in file order both workers
# would reach course_en together and one would wait under the other's lock, ~20 s idle). The other readers go
# last: dispatched after the courses are built, they never wait under a lock, and their few milliseconds
# each even out the end of the session. Those that also run a script (run_script: chapter 9 again, 5-10 s)
# go two thirds through the others instead, when the courses are built: at the end of the list they would sit
# in one worker's last batch behind the browser test while the other worker, done, waits idle.
# (course_en's process runs the courses on the transformers-written checkpoints too: run_courses_on_checkpoints.)
FIRST_FIXTURES = ("course_en", "course_zh")
# Long tests that read no course and share nothing with their neighbours go right after the second leader
# (course_zh's run is the shorter): in file order the browser test (Chromium) comes last, and one worker
# would run it while the other, done, waits idle.
EARLY = ("tests/test_web_browser.py::test_the_scenario_in_a_real_browser",)


def _first_batch(n_items, workers):
    """How many consecutive tests xdist's LoadScheduling sends each worker first (1: one each in turn)."""
    return 1 if n_items < 2 * workers else max(2, n_items // workers // 4)


@pytest.hookimpl(trylast=True)                   # after -k / -m deselection: the batches of the tests that run
def pytest_collection_modifyitems(config, items):
    readers = [i for i in items if COURSE_FIXTURES & set(getattr(i, "fixturenames", ()))]
    for item in readers:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(COURSE_TIMEOUT))
    first = []
    for name in FIRST_FIXTURES:
        item = next((i for i in readers if name in i.fixturenames and i not in first), None)
        if item is not None:
            first.append(item)
    led = {id(i) for i in first}
    later = {id(i) for i in readers}
    others = [i for i in items if id(i) not in later]
    scripts = [i for i in readers if id(i) not in led and "run_script" in i.fixturenames]
    rest = [i for i in readers if id(i) not in led and "run_script" not in i.fixturenames]
    cut = len(others) * 2 // 3
    order = others[:cut] + scripts + others[cut:] + rest
    workers = max(1, int(getattr(config, "workerinput", {}).get("workercount", 1)))
    batch = _first_batch(len(items), workers)
    places = [(j % workers * batch + j // workers if batch > 1 else j, item) for j, item in enumerate(first)]
    for place, item in sorted(places, key=lambda p: p[0]):          # leader j heads worker j % N's first batch
        order.insert(min(place, len(order)), item)
    early = [i for i in order if i.nodeid in EARLY and id(i) not in led]
    if early and batch > 1 and len(first) > 1:
        order = [i for i in order if i not in early]
        at = order.index(first[1]) + 1
        order[at:at] = early
    items[:] = order


def pytest_unconfigure(config):
    """The process that made the session's folder removes it (the controller, after its workers).
    Each test process ends its fork server (tests/forkserver.py) and waits for it."""
    import forkserver
    forkserver.end_server()
    for thread in _building:                        # an error there is the workers' too: they build it again
        thread.join()
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        shutil.rmtree(_TMP, ignore_errors=True)


@pytest.fixture(autouse=True)
def english():
    """Every test starts in English; tests of Chinese output switch explicitly."""
    from qwen.lang import set_lang
    set_lang("en")
    yield
    set_lang("en")


@pytest.fixture(autouse=True)
def plain_products():
    """Every test starts on the lesson's F.linear: a chapter run in this process (engine/cli.py chapter())
    installs the engine's kernel to the end of the process, so it is taken out again here; and
    autograd is put back on, as a chapter may have switched it off."""
    yield
    import torch
    from engine import cli
    from qwen import linear, quant
    while cli._SPEED:
        cli._SPEED.pop().__exit__(None, None, None)
    linear._kernels.clear()
    del quant._kernels[1:]                                        # the first: the plain path, never installed
    torch.set_grad_enabled(True)


@pytest.fixture(scope="session")
def tiny_path():
    """The built-in tiny checkpoint, in the session's own cache folder."""
    from engine.tiny import tiny_model_path
    return tiny_model_path()


@pytest.fixture
def judge(tmp_path, monkeypatch):
    """practice.judge with the learner's folder and progress file in a temp dir (never the real ones)."""
    import practice.judge as judge
    monkeypatch.setenv("QWEN_PRACTICE_DIR", str(tmp_path / "work"))
    monkeypatch.setenv("QWEN_PROGRESS", str(tmp_path / "progress.json"))
    monkeypatch.setenv("QWEN_JUDGE_TIMEOUT", "10")
    monkeypatch.setattr(judge, "WORK", tmp_path / "work")
    return judge


@pytest.fixture
def run_script():
    """Run a script of the project as a learner would, offline; returns the CompletedProcess.
    `python ARGS` in a process forked from one that has imported torch already (tests/forkserver.py)."""
    from forkserver import python

    def run(*args, env=None, input=None):
        full_env = {**os.environ, "PYTHONIOENCODING": "utf-8", **(env or {})}
        return python(args, cwd=ROOT, env=full_env, input=input, timeout=120)
    return run


# `python main.py ARGS` as a learner runs it (main.py as __main__, its argv), with runpy.run_path wrapped:
# as each chapter ends, the plain values it named are pickled (argv[1]) for course_namespaces. Plain:
# what a claim is made of, never a model, tokenizer, module or function (a large object would cost its
# pickling), small tensors only. Then, in the same process, the courses of argv[2] (a JSON list of
# [name, folder, results file], often empty): see run_courses_on_checkpoints.
COURSE = r"""
import contextlib, dataclasses, io, json, pickle, runpy, sys, traceback, types
import torch

def plain(value, depth=0):
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes, torch.dtype)):
        return True
    if isinstance(value, torch.Tensor):
        return value.numel() <= 4096
    if depth > 10:
        return False
    if isinstance(value, (list, tuple, set, frozenset)):
        return len(value) <= 10_000 and all(plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return len(value) <= 10_000 and all(plain(k, depth + 1) and plain(v, depth + 1) for k, v in value.items())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain(dataclasses.asdict(value), depth + 1)
    return False

def keep(ns):
    out = {}
    for name, value in ns.items():
        if not name.startswith("__") and plain(value):
            try:
                out[name] = pickle.dumps(value)
            except Exception:                 # e.g. a dataclass defined in the chapter itself
                pass
    return out

run_path, kept = runpy.run_path, {}

def chapter(path, *args, **kwargs):
    ns = run_path(path, *args, **kwargs)
    kept[int(path.rsplit("/", 1)[-1][2:4])] = keep(ns)
    return ns

runpy.run_path = chapter
file, then, sys.argv = sys.argv[1], json.loads(sys.argv[2]), ["main.py", *sys.argv[3:]]
try:
    run_path("main.py", run_name="__main__")
finally:
    with open(file, "wb") as f:
        pickle.dump(kept, f)
runpy.run_path = run_path

if then:
    import main
    run_chapter = main.run_chapter

    def chapter_options(script):
        if script.name.startswith("ch13_"):
            sys.argv += ["--tokens", "4"]
        return run_chapter(script)

    main.run_chapter = chapter_options
for name, folder, results in then:                       # one after the other
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main.main(["--model", folder, "--max-new-tokens", "4"]) or 0
        except SystemExit as e:
            code = e.code
        except BaseException:
            traceback.print_exc()
            code = 1
    with open(results, "w", encoding="utf-8") as f:
        json.dump({"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}, f)
"""


def _course_files(args):
    import hashlib
    import re
    key = "\0".join(args)
    name = "course-" + re.sub(r"[^\w.-]+", "_", key)[:60] + "-" + hashlib.sha1(key.encode()).hexdigest()[:8]
    return _TMP / (name + ".txt"), _TMP / (name + ".pickle")


def run_course(*args):
    """stdout of `python main.py ARGS` (the whole course, one process), run once per test session:
    under xdist the first worker that asks runs it and the others read its output. COURSE_EN's process
    then runs the courses on the transformers-written checkpoints too (run_courses_on_checkpoints)."""
    import fcntl
    import json
    from forkserver import python

    out, kept = _course_files(args)
    with open(str(out) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not out.is_file():
            then = _courses_after(args)
            r = python(["-c", COURSE, kept, json.dumps(then), *args], cwd=ROOT, timeout=330)
            assert r.returncode == 0, r.stderr
            out.write_text(r.stdout, encoding="utf-8")
        return out.read_text(encoding="utf-8")


# The whole course (main.py --model FOLDER --max-new-tokens 4) on each of TRANSFORMERS_CHECKPOINTS, one
# after the other, in COURSE_EN's process once that course has run (its output is as in a process of its
# own: it runs first). In a process of their own they would import torch's dynamo and transformers (chapter
# 8's comparison) a second time, with both courses on one worker anyway (pytest_collection_modifyitems).
# Every chapter reads the checkpoint as on any other; the reply's length is no part
# of the format (chapter 9 on text-bf16-tied: 6.8 -> 1 s of CPU at load 9), nor is chapter 13's count of
# greedy tokens compared (--tokens 4, not its 32 on a checkpoint other than the built-in tiny one: 3 rounds
# x 3 models x 32 decode steps, the 248,320-row output layer in each on text-bf16-tied, are most of the
# three courses' CPU time).
def _checkpoint_course_file(name):
    return _TMP / f"course-on-{name}.json"


def _courses_after(args):
    """[[name, folder, results file]] of the courses COURSE ARGS's process runs after its own."""
    import importlib.util
    if args != COURSE_EN or importlib.util.find_spec("transformers") is None:
        return []
    try:
        folders = write_transformers_checkpoints()
    except Exception:                            # course_en runs alone; the fixture transformers_checkpoints
        return []                                # raises the same error in the tests that read them
    return [[name, str(folder), str(_checkpoint_course_file(name))] for name, folder in folders.items()]


def run_courses_on_checkpoints():
    """{name: {"code", "stdout", "stderr"}} of the course on each of TRANSFORMERS_CHECKPOINTS."""
    import json
    run_course(*COURSE_EN)
    files = {name: _checkpoint_course_file(name) for name in TRANSFORMERS_CHECKPOINTS}
    assert all(f.is_file() for f in files.values()), "course_en's process ran no course on these checkpoints"
    return {name: json.loads(f.read_text(encoding="utf-8")) for name, f in files.items()}


COURSE_EN = ("--lang", "en")                     # offline: falls back to the tiny checkpoint, with its banner
# In Chinese, with every chapter's figures (tests/test_chapters.py test_plots reads them: no run of its own)
# and replies of 8 tokens in chapters 9 and 11: their sentences are the same at any length, and the
# 64-token default (4 runs of it in chapter 9) is course_en's, the notebooks' and chapter 9's own run's.
COURSE_ZH_FIGURES = _TMP / "course-zh-figures"
COURSE_ZH = ("--tiny", "--lang", "zh", "--max-new-tokens", "8", "--plot", "--out", str(COURSE_ZH_FIGURES))


@pytest.fixture(scope="session")
def course_en(tiny_path):
    """stdout of `python main.py --lang en`: every chapter, on the tiny checkpoint (no model here)."""
    return run_course(*COURSE_EN)


@pytest.fixture(scope="session")
def course_zh(tiny_path):
    """stdout of `python main.py --tiny --lang zh ...` (COURSE_ZH)."""
    return run_course(*COURSE_ZH)


def course_namespaces(*args):
    """{chapter number: {name: value}}: the plain values each chapter of run_course(*args) named
    (the same run, not one more)."""
    import pickle
    run_course(*args)
    kept = pickle.loads(_course_files(args)[1].read_bytes())
    return {n: {name: pickle.loads(value) for name, value in ns.items()} for n, ns in kept.items()}


# name -> write_transformers_checkpoint's arguments (tests/helpers.py); tensors made when first written
TRANSFORMERS_CHECKPOINTS = {
    "text-fp32": dict(layout="text", dtype="float32", tied=False, vocab_size=512, extra=True),
    "multimodal-fp32": dict(layout="multimodal", dtype="float32", tied=False, vocab_size=512, extra=True),
    "text-bf16-tied": dict(layout="text", dtype="bfloat16", tied=True, vocab_size=248320, tokenizer=True),
}


@pytest.fixture(scope="session")
def transformers_checkpoints():
    """{name: folder} for TRANSFORMERS_CHECKPOINTS (write_transformers_checkpoints)."""
    return write_transformers_checkpoints()


def write_transformers_checkpoints():
    """{name: folder} for TRANSFORMERS_CHECKPOINTS, written by transformers once per session (skips
    without transformers). extra=True adds tensors the course does not know: a rotary inv_freq
    buffer some exports keep, and a layer beyond the config with its norm. The bf16 tied one has
    Qwen3.5's vocabulary size and the tiny checkpoint's tokenizer files."""
    import fcntl
    import torch
    from helpers import write_transformers_checkpoint

    folders = {}
    with open(_TMP / "transformers-checkpoints.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for name, spec in TRANSFORMERS_CHECKPOINTS.items():
            folder = _TMP / "transformers-checkpoints" / name
            if not (folder / ".complete").is_file():
                shutil.rmtree(folder, ignore_errors=True)
                extra = {"model.rotary_emb.inv_freq": torch.ones(4), "model.layers.9.mlp.up_proj.weight": torch.ones(2, 2),
                         "model.layers.9.input_layernorm.weight": torch.ones(2)} if spec.get("extra") else None
                write_transformers_checkpoint(folder, spec["layout"], getattr(torch, spec["dtype"]), spec["tied"],
                                              vocab_size=spec["vocab_size"], extra=extra,
                                              tokenizer=spec.get("tokenizer", False))
                (folder / ".complete").write_text("", encoding="utf-8")
            folders[name] = folder
    return folders
