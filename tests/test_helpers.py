"""The test helper writes the layouts it promises (other tests rely on them)."""
import torch

from helpers import write_transformers_checkpoint
from qwen.config import Config
from qwen.weights import load_weights


def test_transformers_checkpoints_have_the_promised_layouts(tmp_path):
    flat = load_weights(write_transformers_checkpoint(tmp_path / "flat", "text", torch.float32, tied=False))
    assert "model.layers.0.input_layernorm.weight" in flat.all_names and "lm_head.weight" in flat.all_names
    assert flat.dtype("layers.3.self_attn.q_norm.weight") == torch.float32
    multi = write_transformers_checkpoint(tmp_path / "multi", "multimodal", torch.float32, tied=False)
    names = load_weights(multi).all_names
    assert "model.language_model.norm.weight" in names and any(n.startswith("model.visual.") for n in names)
    assert "text_config" in Config.load(multi).raw
    tied = write_transformers_checkpoint(tmp_path / "tied", "text", torch.bfloat16, tied=True)
    W = load_weights(tied)
    assert "lm_head.weight" not in W.all_names and W.dtype("embed_tokens.weight") == torch.bfloat16
    assert Config.load(tied).tie_word_embeddings is True


def test_a_test_session_leaves_no_folder_behind(tmp_path):
    """The session's folder (tiny checkpoint, Hugging Face cache, the checkpoints transformers
    writes) is removed when pytest ends: nothing is left in the system's temp.
    The session runs one quick test that writes into the session's Hugging Face cache and leaves its
    hf-home folder there, so the folder removed is not an empty one (a test of test_mlp.py, writing a
    transformers checkpoint, took 5.0 s of CPU here, this one 1.0 s)."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_XDIST_WORKER", "TBH_TEST_TMP")}
    env["TMPDIR"] = str(tmp)
    root = Path(__file__).resolve().parents[1]
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp",
                        str(tmp_path / "base"), "tests/test_find_model.py::test_then_the_hugging_face_cache_without_network"],
                       cwd=root, env=env, capture_output=True, text=True, timeout=100)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert sorted(x.name for x in tmp.iterdir()) == []


PROBE = r"""
import atexit, os, sys
print("argv", sys.argv, "path0", repr(sys.path[0]), "file", globals().get("__file__"), "name", __name__)
print("cwd", os.getcwd(), "env", os.environ.get("PROBE"), "pythonpath", [p for p in sys.path if p.startswith("/probe")])
print("io", sys.stdout.encoding, sys.stdout.errors, sys.stderr.errors, sys.stdout.isatty(), "stdin", repr(sys.stdin.read()))
print("main", sys.modules["__main__"].__dict__ is globals(), "threads", os.environ.get("OMP_NUM_THREADS"))
atexit.register(lambda: print("atexit ran"))
print("\udc80" if sys.argv[-1] == "surrogate" else "ok", file=sys.stderr)
how = sys.argv[-1]
if how == "raise":
    raise ValueError("boom")
sys.exit({"none": None, "three": 3, "text": "stopped here"}.get(how, 0))
"""


def test_the_fork_server_runs_a_script_as_python_would(tmp_path):
    """tests/forkserver.py's `python ARGS` against a real interpreter, on what tests read: argv,
    sys.path[0], __file__, __main__, cwd, environment, PYTHONPATH, stdin, stdio encodings, atexit,
    exit codes (None, 3, a message, an exception: its traceback from the script's own frame)."""
    import os
    import subprocess
    import sys
    import forkserver

    script = tmp_path / "probe.py"
    script.write_text(PROBE, encoding="utf-8")
    env = {**os.environ, "PROBE": "yes", "PYTHONPATH": "/probe/a" + os.pathsep + "/probe/b",
           "PYTHONIOENCODING": "utf-8:surrogateescape"}
    cases = [(["-c", PROBE, "x", "none"], "in"), ([script.name, "three"], ""), ([str(script), "text"], "x\ny"),
             ([script.name, "raise"], ""), ([script.name, "surrogate"], "")]
    for args, stdin in cases:
        real = subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, input=stdin, capture_output=True,
                              text=True, encoding="utf-8", errors="surrogateescape", timeout=60)
        forked = forkserver.python(args, cwd=tmp_path, env=env, input=stdin, timeout=60, text=False)
        assert forked.returncode == real.returncode, (args, forked, real)
        assert forked.stdout.decode("utf-8", "surrogateescape") == real.stdout, args
        assert forked.stderr.decode("utf-8", "surrogateescape") == real.stderr, args
        if "raise" in args:
            assert 'line 11, in <module>\n    raise ValueError("boom")\nValueError: boom' in real.stderr


def test_the_fork_server_kills_at_the_timeout_and_starts_afresh_where_it_must(tmp_path):
    """A run past its timeout is killed (TimeoutExpired, as subprocess.run); a startup variable that
    differs (threads) or a sitecustomize on PYTHONPATH gets a real interpreter."""
    import os
    import subprocess
    import time
    import forkserver
    import pytest

    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        forkserver.python(["-c", "import time; time.sleep(60)"], timeout=1)
    assert time.monotonic() - start < 30
    assert forkserver.python(["-c", "print('again')"]).stdout == "again\n"       # a new server after the kill
    code = "import os, torch; print(torch.get_num_threads(), os.getppid() == int(os.environ['TEST_PID']))"
    env = {**os.environ, "TEST_PID": str(os.getpid())}
    assert forkserver.python(["-c", code], env=env).stdout == "1 False\n"              # forked from the server
    assert forkserver.python(["-c", code], env={**env, "OMP_NUM_THREADS": "2"}).stdout == "2 True\n"   # a real start
    (tmp_path / "sitecustomize.py").write_text("import builtins; builtins.CUSTOMIZED = True\n", encoding="utf-8")
    r = forkserver.python(["-c", "print(CUSTOMIZED)"], env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert r.stdout == "True\n", r.stderr


def test_a_child_for_ctrl_c_gets_sigint_even_where_pytest_was_started_ignoring_it():
    """`pytest ... &` from a script (no job control) ignores SIGINT, and so does every child it starts, so
    test_chat's Ctrl-C test would fail after 100 s. sigint_as_in_a_terminal gives the child SIGINT's default."""
    import signal
    import subprocess
    from helpers import sigint_as_in_a_terminal

    def ignored(**kw):                                          # bit 1 of SigIgn: SIGINT (2)
        out = subprocess.run(["/bin/sh", "-c", "grep SigIgn /proc/self/status"], capture_output=True, text=True,
                             timeout=30, **kw).stdout
        return bool(int(out.split()[1], 16) & 1 << (signal.SIGINT - 1))
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)    # as such a shell starts pytest
    try:
        assert ignored() and not ignored(preexec_fn=sigint_as_in_a_terminal)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_course_leaders_and_the_early_tests_head_the_workers_first_batches():
    """conftest's order for xdist: course_en's and course_zh's first readers lead worker 0's and worker 1's
    first batches, the EARLY tests follow course_zh's leader, the other course readers come last."""
    from types import SimpleNamespace

    import conftest

    def item(nodeid, *fixtures):
        return SimpleNamespace(nodeid=nodeid, fixturenames=list(fixtures), get_closest_marker=lambda name: None,
                               add_marker=lambda marker: None)

    plain = [item(f"tests/test_a.py::test_{i}") for i in range(40)]
    browser = item(conftest.EARLY[0], "web")
    en, en2 = item("tests/test_b.py::test_en", "course_en"), item("tests/test_b.py::test_en2", "course_en")
    zh = item("tests/test_c.py::test_zh", "course_zh")
    items = plain[:20] + [en, zh] + plain[20:] + [en2, browser]
    config = SimpleNamespace(workerinput={"workercount": 2})
    conftest.pytest_collection_modifyitems(config, items)
    batch = conftest._first_batch(len(items), 2)                     # 5: 44 tests, 2 workers
    assert len(items) == 44 and batch == 5
    assert items[0] is en and items[batch] is zh and items[batch + 1] is browser
    assert items[-1] is en2 and sorted(i.nodeid for i in items) == sorted(i.nodeid for i in plain + [en, en2, zh, browser])
