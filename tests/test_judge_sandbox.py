"""The judge's sandbox: limits that count what a solution adds (not torch's reservations), every
process dies with the grading, hostile solutions cannot fake a pass, files are read as Python reads them."""
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT

SOLUTIONS = ROOT / "practice" / "_judge" / "solutions"


def grade(judge, tiny_path, tmp_path, ex_id, body, name="mine.py"):
    f = tmp_path / name
    if isinstance(body, bytes):
        f.write_bytes(body)
    else:
        f.write_text(body, encoding="utf-8")
    return judge.grade(judge.BY_ID[ex_id], f, tiny_path)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:                                                            # a zombie is dead
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


# ------------------------------------------------------------------------------------------ 1. limits

def test_a_large_import_time_reservation_does_not_count(run_script, tmp_path, tiny_path):
    """A CUDA build of torch maps ~3 GB of address space at import and never touches it; faked here with
    an 8 GB PROT_NONE mapping made before the judge starts. The limit counts what the solution adds.
    One judge process (--all) grades both files: a passing one, and one that adds 2 GB (1 GB allowed)."""
    from practice._judge.exercises import BY_ID
    site, work = tmp_path / "site", tmp_path / "work"
    site.mkdir()
    work.mkdir()
    size = tmp_path / "size"                                        # the judge's address space after the mapping
    (site / "sitecustomize.py").write_text(
        "import mmap, os\n_reserved = mmap.mmap(-1, 8 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | "
        "getattr(mmap, 'MAP_NORESERVE', 0), prot=0)\n"
        f"open({str(size)!r}, 'w').write(str(int(open('/proc/self/statm').read().split()[0]) * os.sysconf('SC_PAGE_SIZE')))\n",
        encoding="utf-8")
    (work / BY_ID["204"].filename).write_text((SOLUTIONS / "s204.py").read_text(encoding="utf-8"), encoding="utf-8")
    (work / BY_ID["205"].filename).write_text(
        "import torch\ndef l2norm(x, eps=1e-6):\n    return torch.ones(2 * 2**30, dtype=torch.uint8)\n", encoding="utf-8")
    env = {"PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "QWEN_PROGRESS": str(tmp_path / "p.json"),
           "QWEN_JUDGE_MEMORY": "1", "QWEN_PRACTICE_DIR": str(work)}
    r = run_script("practice/judge.py", "--all", "--model", tiny_path, env=env)
    assert int(size.read_text()) > 8 << 30                          # the reservation is really there, in the judge
    reports = {line.split()[1]: line for line in r.stdout.splitlines() if line[:1] in "✓✗"}
    assert r.returncode == 1 and "passed all" in reports["204"], r.stdout + r.stderr
    assert "more memory than the 1 GB allowed" in reports["205"], r.stdout + r.stderr


def test_fifty_forked_children_end_with_the_grading(judge, tiny_path, tmp_path, monkeypatch):
    pids = tmp_path / "pids.txt"
    body = (SOLUTIONS / "s205.py").read_text(encoding="utf-8") + f"""
import os, time
_started = False
def _spawn():
    global _started
    if _started:
        return
    _started = True
    for _ in range(50):
        pid = os.fork()
        if pid == 0:
            time.sleep(600)
            os._exit(0)
        with open({str(pids)!r}, "a") as f:
            f.write(f"{{pid}}\\n")
_l2 = l2norm
def l2norm(x, eps=1e-6):
    _spawn()
    return _l2(x, eps)
"""
    result = grade(judge, tiny_path, tmp_path, "205", body)
    assert result["status"] == "pass", judge.summary_line(result)
    children = [int(p) for p in pids.read_text().split()]
    assert len(children) == 50
    time.sleep(0.2)
    assert not any(alive(p) for p in children)


def test_children_cannot_exceed_the_memory_limit_together(judge, tiny_path, tmp_path, monkeypatch):
    monkeypatch.setenv("QWEN_JUDGE_MEMORY", "0.4")                  # 4 children of 150 MB: 600 MB together
    pids = tmp_path / "pids.txt"
    body = f"""
import os, time
def l2norm(x, eps=1e-6):
    for _ in range(4):
        pid = os.fork()
        if pid == 0:
            block = b'x' * (150 * 2**20)                             # touched: resident
            time.sleep(600)
            os._exit(0)
        with open({str(pids)!r}, "a") as f:
            f.write(f"{{pid}}\\n")
    time.sleep(600)
"""
    start = time.monotonic()
    result = grade(judge, tiny_path, tmp_path, "205", body)
    line = judge.summary_line(result)
    assert "more than the 0.4 GB of memory allowed" in line and time.monotonic() - start < 8, line
    assert not any(alive(int(p)) for p in pids.read_text().split())


def test_too_many_processes_end_the_grading(judge, tiny_path, tmp_path):
    body = """
import os, time
def l2norm(x, eps=1e-6):
    for _ in range(100):
        if os.fork() == 0:
            time.sleep(600)
            os._exit(0)
    time.sleep(600)
"""
    line = judge.summary_line(grade(judge, tiny_path, tmp_path, "205", body))
    assert "started more than 64 processes" in line, line


def test_a_stray_thread_neither_holds_the_judge_nor_leaks_output(run_script, tiny_path, tmp_path):
    body = (SOLUTIONS / "s205.py").read_text(encoding="utf-8") + """
import threading, time
def _chatter():
    while True:
        print("STRAY THREAD OUTPUT", flush=True)
        time.sleep(0.01)
threading.Thread(target=_chatter).start()                           # not a daemon: would hold a normal exit
"""
    f = tmp_path / "stray.py"
    f.write_text(body, encoding="utf-8")
    start = time.monotonic()
    r = run_script("practice/judge.py", "205", "--file", f, "--model", tiny_path,
                   env={"QWEN_JUDGE_TIMEOUT": "30", "QWEN_PROGRESS": str(tmp_path / "p.json")})
    assert r.returncode == 0 and "passed all 8 cases" in r.stdout
    assert "STRAY" not in r.stdout + r.stderr and time.monotonic() - start < 25


def test_ctrl_c_stops_at_once_and_ends_the_sandbox(tiny_path, tmp_path):
    pidfile = tmp_path / "pid"
    f = tmp_path / "loop.py"
    f.write_text(f"import os\ndef l2norm(x, eps=1e-6):\n    open({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
                 "    while True:\n        pass\n", encoding="utf-8")
    env = {**os.environ, "QWEN_JUDGE_TIMEOUT": "60", "QWEN_PROGRESS": str(tmp_path / "p.json"), "PYTHONIOENCODING": "utf-8"}
    proc = subprocess.Popen([sys.executable, "practice/judge.py", "205", "--file", str(f), "--model", str(tiny_path)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 60
        while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < end:
            time.sleep(0.1)
        sandbox_pid = int(pidfile.read_text())
        start = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
        # "at once": far below the 60 s grading limit; the bound leaves room for a loaded 2-core machine
        assert time.monotonic() - start < 10 and proc.returncode == 130 and "Stopped." in err and "Traceback" not in err
        time.sleep(0.2)
        assert not alive(sandbox_pid)
    finally:
        proc.kill()


# ------------------------------------------------------------------------------------------ 3. no faked pass

HOSTILE = {
    "patch_allclose": "import torch\ntorch.allclose = lambda *a, **k: True\ntorch.equal = lambda *a, **k: True\n"
                      "def l2norm(x, eps=1e-6):\n    return x\n",
    "patch_tolerance": "from practice._judge import exercises, compare\nfrom practice._judge.exercises import Tol\n"
                       "for k in exercises.DEFAULT_TOL: exercises.DEFAULT_TOL[k] = Tol(1e9, 1e9)\n"
                       "compare.check_tensor = lambda *a, **k: None\ndef l2norm(x, eps=1e-6):\n    return x\n",
    "patch_eq": "import torch\ntorch.Tensor.__eq__ = lambda a, b: torch.ones_like(a, dtype=torch.bool)\n"
                "def l2norm(x, eps=1e-6):\n    return x * 0\n",
    "patch_json": "import json\n_d = json.dumps\njson.dumps = lambda o, *a, **k: _d({**o, 'status': 'pass', 'ok': True} "
                  "if isinstance(o, dict) else o, *a, **k)\ndef l2norm(x, eps=1e-6):\n    return x\n",
    "caller_frame": "import inspect, gc, torch\ndef l2norm(x, eps=1e-6):\n"
                    "    for f in inspect.stack():\n        for v in f.frame.f_locals.values():\n"
                    "            e = getattr(v, 'expected', None)\n            if isinstance(e, torch.Tensor): return e\n"
                    "    for o in gc.get_objects():\n        e = getattr(o, 'expected', None) if type(o).__name__ == 'Case' else None\n"
                    "        if isinstance(e, torch.Tensor) and e.shape == x.shape: return e\n    return x\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_solutions_cannot_fake_a_pass(judge, tiny_path, tmp_path, name):
    result = grade(judge, tiny_path, tmp_path, "205", HOSTILE[name], f"{name}.py")
    assert result["status"] == "fail" and not result["cases"][0]["ok"], judge.summary_line(result)


def test_an_int_subclass_equal_to_everything_does_not_pass(judge, tiny_path, tmp_path):
    body = ("class Yes(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
            "def count_parameters(header, layer_types):\n"
            "    return {'linear_attention': Yes(1), 'full_attention': Yes(2), 'outside_layers': Yes(3)}\n")
    result = grade(judge, tiny_path, tmp_path, "202", body)
    assert result["status"] == "fail" and "got 1, expected" in judge.summary_line(result)


def test_learner_code_cannot_write_progress_through_the_judge(judge, tiny_path, tmp_path, capsys):
    f = tmp_path / "work" / "205_l2norm.py"
    f.parent.mkdir()
    f.write_text("from practice._judge import progress\ntry:\n    progress.update(lambda p: p.update({'205': "
                 "{'status': 'pass', 'passed': True}}))\nexcept Exception:\n    pass\n"
                 "def l2norm(x, eps=1e-6):\n    return x\n", encoding="utf-8")
    code = judge.main(["205", "--model", str(tiny_path)])
    capsys.readouterr()
    import json
    saved = json.loads((tmp_path / "progress.json").read_text(encoding="utf-8"))
    assert code == 1 and not saved.get("205", {}).get("passed")


# ------------------------------------------------------------------------------------------ 4. files as Python reads them

S205 = (SOLUTIONS / "s205.py").read_text(encoding="utf-8")


@pytest.mark.parametrize("name, data, expected", [
    ("bom", b"\xef\xbb\xbf# caf\xc3\xa9\n" + S205.encode(), "pass"),
    ("latin1", b"# -*- coding: latin-1 -*-\nNAME = 'caf\xe9'\n" + S205.encode(), "pass"),
    ("utf16", ("# café\n" + S205).encode("utf-16"), "saved as UTF-16"),
    ("undecodable", b"NAME = 'caf\xe9'\n" + S205.encode(), "line 1 cannot be decoded"),
    ("nul", S205.encode() + b"\n# \x00\n", "contains a NUL byte (line"),
])
def test_files_are_read_as_python_reads_them(judge, tiny_path, tmp_path, name, data, expected):
    result = grade(judge, tiny_path, tmp_path, "205", data, f"{name}.py")
    line = judge.summary_line(result)
    if expected == "pass":
        assert result["status"] == "pass", line
    else:
        assert expected in line and "None" not in line and "\n" not in line, line


def test_the_module_is_registered_while_it_runs(judge, tiny_path, tmp_path):
    body = ("from __future__ import annotations\nimport dataclasses, pickle, typing, torch\n"
            "@dataclasses.dataclass\nclass Settings:\n    eps: float = 1e-6\n"
            "HINTS = typing.get_type_hints(Settings)\n"
            "def _unit(x: torch.Tensor, eps: float) -> torch.Tensor:\n"
            "    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)\n"
            "def l2norm(x, eps=1e-6):\n    s = pickle.loads(pickle.dumps(Settings(eps)))\n"
            "    return pickle.loads(pickle.dumps(_unit))(x, s.eps)\n")
    result = grade(judge, tiny_path, tmp_path, "205", body)
    assert result["status"] == "pass", judge.summary_line(result)


@pytest.mark.parametrize("value", ["abc", "inf", "nan", "1e9", "0"])
def test_bad_timeout_values_are_one_line(judge, capsys, value, monkeypatch):
    monkeypatch.setenv("QWEN_JUDGE_TIMEOUT", value)
    code = judge.main(["205", "--tiny"])
    err = capsys.readouterr().err
    assert code == 2 and "QWEN_JUDGE_TIMEOUT" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_broken_model_is_one_line_about_the_model_and_nothing_is_recorded(judge, capsys, tmp_path, monkeypatch, how):
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{not json", encoding="utf-8")
    args = ["205"] + (["--model", str(broken)] if how == "flag" else [])
    if how == "env":
        monkeypatch.setenv("QWEN_MODEL", str(tmp_path / "no-such-model"))
    code = judge.main(args)
    out = capsys.readouterr()
    assert code == 2 and "model" in out.err and len(out.err.strip().splitlines()) == 1 and "Traceback" not in out.err
    assert not (tmp_path / "progress.json").exists() or "205" not in (tmp_path / "progress.json").read_text()


def test_where_no_memory_limit_can_be_set_the_sandbox_says_so_and_the_report_shows_it(judge, capsys):
    """Without /proc (as on macOS) the limit cannot be measured from: the note says so; the report shows it."""
    code = ("from practice._judge import confine\nconfine._address_space = lambda: None\n"
            "print(confine.set_limits(1 << 30))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    note = r.stdout.strip()
    assert "graded without it" in note, r.stdout + r.stderr
    result = {"exercise": "205", "file": "x.py", "status": "pass", "cases": [], "error": None, "printed": 0, "note": note}
    judge.print_report(judge.BY_ID["205"], result, verbose=False)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[1].strip() == note


def test_a_grading_that_kills_its_parent_is_not_a_pass_and_the_next_one_works(judge, tiny_path, tmp_path, monkeypatch,
                                                                             capsys):
    """The learner's code may signal the learner's processes: killing the process that started it (the fork
    server, or the judge's side of a fresh interpreter) is not a pass, and the next grading, from a notebook
    (functions sent as source), works."""
    from practice._judge import sandbox
    for name, value in (("_ahead", []), ("_server", None), ("_server_starts", 0)):   # the suite's server stays
        monkeypatch.setattr(sandbox, name, value)
    monkeypatch.setenv("QWEN_PROGRESS", str(tmp_path / "progress.json"))
    try:
        r = grade(judge, tiny_path, tmp_path, "205", "import os\ndef l2norm(x, eps=1e-6):\n    os.kill(os.getppid(), 9)\n")
        assert r["status"] != "pass", judge.summary_line(r)
        cell = tmp_path / "cell.py"
        cell.write_text("import torch\ndef l2norm(x, eps=1e-6):\n    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)\n",
                        encoding="utf-8")
        import importlib.util
        spec = importlib.util.spec_from_file_location("cell", cell)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        from practice import check
        graded = check(205, module.l2norm, tiny=True)
        assert graded.status == "fail" and "divided by the RMS" in capsys.readouterr().out
    finally:
        for process in sandbox._ahead:
            process.stop()
        if sandbox._server is not None:
            sandbox._server[0].kill()
            sandbox._server[0].wait()
            sandbox._server[1].close()


PARENT = "import os\ndef l2norm(x, eps=1e-6):\n    raise ValueError(f'parent {os.getppid()}')\n"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is Linux's")
def test_the_fork_server_holds_nothing_of_the_judge_and_a_dead_one_is_started_again_once(judge, tiny_path, tmp_path,
                                                                                        monkeypatch, capsys):
    """On Linux a server started clean forks each grading's process: one thread; it holds its control socket,
    /dev/null and, per waiting child, a pidfd and the pipe for its exit code; no secret of the judge. Killed, it is
    started again once; killed again, each grading is a fresh interpreter, without a word."""
    from practice._judge import sandbox
    assert sandbox.FORKS
    for name, value in (("_ahead", []), ("_server", None), ("_server_starts", 0)):
        monkeypatch.setattr(sandbox, name, value)
    monkeypatch.setenv("HF_TOKEN", "hf_" + "x" * 29)
    monkeypatch.setenv("QWEN_PROGRESS", str(tmp_path / "progress.json"))
    parents = []
    try:
        for _ in range(3):
            line = judge.summary_line(grade(judge, tiny_path, tmp_path, "205", PARENT))
            assert "ValueError: parent" in line, line
            parents.append(int(line.split("ValueError: parent ")[1].split()[0]))
            if len(parents) == 1:
                server = sandbox._server[0].pid
                assert parents[0] == server
                environ = open(f"/proc/{server}/environ", "rb").read()
                assert b"HF_TOKEN" not in environ and b"QWEN_PROGRESS" not in environ
                assert "\nThreads:\t1\n" in open(f"/proc/{server}/status", encoding="utf-8").read()  # forks with one
                held = sorted(os.readlink(f"/proc/{server}/fd/{fd}") for fd in os.listdir(f"/proc/{server}/fd"))
                assert held[0].startswith("/dev/null") and held[1].startswith("/dev/null"), held
                assert sum(h.startswith("socket:") for h in held) == 1, held
                waiting = sum(h == "anon_inode:[pidfd]" for h in held)
                assert waiting >= 1 and sum(h.startswith("pipe:") for h in held) == waiting and len(held) == 3 + 2 * waiting
            if sandbox._server is not None:
                sandbox._server[0].kill()
                sandbox._server[0].wait()
        assert parents[1] not in (parents[0], os.getpid()) and parents[2] == os.getpid(), parents
        assert sandbox._server_starts == 2 and sandbox._server[0].poll() is not None
        out = capsys.readouterr()
        assert "server" not in out.out + out.err
    finally:
        for process in sandbox._ahead:
            process.stop()


# ------------------------------------------------------------------------------------------ 5. limits set in the child

def test_the_sandbox_writes_bounded_files_in_a_private_folder_removed_afterwards(judge, tiny_path, tmp_path):
    """RLIMIT_FSIZE and RLIMIT_NPROC are set; the working folder is the sandbox's own, gone after the grading."""
    from practice._judge import confine
    body = """
import os, resource
def l2norm(x, eps=1e-6):
    open("scratch.txt", "w").write("relative paths land in the working folder")
    fsize, nproc = resource.getrlimit(resource.RLIMIT_FSIZE)[0], resource.getrlimit(resource.RLIMIT_NPROC)[0]
    raise RuntimeError(f"FSIZE={fsize} NPROC={nproc} CWD={os.getcwd()} END")
"""
    line = judge.summary_line(grade(judge, tiny_path, tmp_path, "205", body))
    fields = dict(part.split("=", 1) for part in line.split("RuntimeError: ")[1].split(" END")[0].split())
    assert int(fields["FSIZE"]) == confine.MAX_FILE and 0 < int(fields["NPROC"]) < 1 << 40, line
    assert os.path.basename(fields["CWD"]).startswith(f"qwen-judge-{os.getpid()}-") and not os.path.exists(fields["CWD"])


def test_working_folders_left_by_a_judge_that_died_are_removed(tmp_path, monkeypatch):
    import tempfile
    from practice._judge import sandbox
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    stale, live = tmp_path / f"qwen-judge-{dead.pid}-abc", tmp_path / "qwen-judge-1-abc"
    for d in (stale, live):
        (d / "sub").mkdir(parents=True)
    sandbox.sweep()
    assert not stale.exists() and live.exists()
