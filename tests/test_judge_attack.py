"""The judge attacked as a hostile or clumsy learner would: every attack ends in one line, within
the time limit, with no false pass, and neither the learner's file nor their progress is lost."""
import json
import os
import struct
import time

import pytest

from conftest import ROOT
from helpers import frame_writer
from test_web import ask, web  # noqa: F401 - the served page, in this process

SOLUTIONS = ROOT / "practice" / "_judge" / "solutions"
S205 = (SOLUTIONS / "s205.py").read_text(encoding="utf-8")


@pytest.fixture
def judge(judge, tmp_path):
    """The shared fixture (conftest.py), with the learner's folder already made."""
    (tmp_path / "work").mkdir()
    return judge


def grade(judge, tiny_path, tmp_path, body, ex_id="205", name="mine.py"):
    f = tmp_path / name
    f.write_text(body, encoding="utf-8")
    return judge.grade(judge.BY_ID[ex_id], f, tiny_path)


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:                  # a zombie is dead
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


# ------------------------------------------------------------------------------------------ files that are not files

@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_a_learner_file_that_is_not_a_regular_file_is_one_line(judge, tiny_path, tmp_path, capsys, kind):
    """A pipe would block the judge forever and /dev/zero would fill its memory: neither is read."""
    f = tmp_path / "work" / "205_l2norm.py"
    os.mkfifo(f) if kind == "fifo" else os.symlink("/dev/zero", f)
    assert judge.main(["205", "--model", str(tiny_path)]) == 1
    out = capsys.readouterr().out
    assert "not a regular file" in out and "Traceback" not in out, out
    assert judge.main([]) == 0                                       # the listing does not read it either
    assert "205" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["/dev/zero", "fifo", "~no-such-user-judge/progress.json"])
def test_a_progress_path_that_cannot_hold_progress_is_one_line(judge, tmp_path, monkeypatch, capsys, value):
    if value == "fifo":
        value = str(tmp_path / "progress.fifo")
        os.mkfifo(value)
    monkeypatch.chdir(tmp_path)                                       # "~nobody/..." is a relative path, as in a shell
    monkeypatch.setenv("QWEN_PROGRESS", value)
    assert judge.main([]) == 0
    judge.progress.update(lambda p: p.setdefault("205", {}).update(status="fail"))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "Grade one" in out
    assert len([line for line in err.splitlines() if line.startswith("Progress")]) <= 2, err
    assert value.startswith("~") or not os.path.isfile(value)         # a device or pipe is never replaced by a file


# ------------------------------------------------------------------------------------------ processes

def test_a_process_that_tries_to_leave_the_session_still_ends_with_the_grading(judge, tiny_path, tmp_path, monkeypatch):
    """Double fork and setsid, faster than the judge polls: the grandchild dies with the grading (the grading
    process is its subreaper, and the judge ends everything below it)."""
    pidfile = tmp_path / "escaped.pid"
    body = S205.replace("def l2norm", "def _l2norm") + f"""
import os, time
def l2norm(x, eps=1e-6):
    if not os.path.exists({str(pidfile)!r}) and os.fork() == 0:
        if os.fork() == 0:
            try:
                os.setsid()
            except OSError:
                pass
            open({str(pidfile)!r}, "w").write(str(os.getpid()))
            time.sleep(600)
        os._exit(0)
    while not os.path.exists({str(pidfile)!r}):
        time.sleep(0.01)
    return _l2norm(x, eps)
"""
    result = grade(judge, tiny_path, tmp_path, body)
    assert result["status"] == "pass", judge.summary_line(result)
    pid = int(pidfile.read_text())
    end = time.monotonic() + 2
    while alive(pid) and time.monotonic() < end:
        time.sleep(0.05)
    assert not alive(pid)


def test_closing_every_file_descriptor_is_not_called_os_exit(judge, tiny_path, tmp_path):
    body = "import os\nos.closerange(0, 4096)\n" + S205
    line = judge.summary_line(grade(judge, tiny_path, tmp_path, body))
    assert "os._exit" not in line and "without a result" in line, line


# ------------------------------------------------------------------------------------------ results too large to send

@pytest.mark.parametrize("expr", ["torch.zeros(1).expand(10**12)", "torch.empty(2**27)"])
def test_a_result_too_large_to_send_is_named_as_such(judge, tiny_path, tmp_path, expr):
    body = f"import torch\ndef l2norm(x, eps=1e-6):\n    return {expr}\n"
    line = judge.summary_line(grade(judge, tiny_path, tmp_path, body))
    assert "too large" in line and "type Tensor" not in line, line


# ------------------------------------------------------------------------------------------ writing to the judge's pipe

def _socket_writer(header, payload=b""):
    """A solution that writes a hand-made frame to every pipe or socket it holds (its result pipe among them)."""
    head = header if isinstance(header, bytes) else json.dumps(header).encode()
    frame = struct.pack("<QI", 4 + len(head) + len(payload), len(head)) + head + payload
    return frame_writer(frame)


@pytest.mark.parametrize("header, payload", [
    (b'{"blobs": [], "kind": "case", "i": 0, "value": ' + b"[" * 100000 + b"]" * 100000 + b"}", b""),
    ({"blobs": [0], "kind": "case", "i": 0, "value": {"T": 0, "dtype": "float32", "shape": [2**70, 0]}}, b""),
    ({"blobs": [4], "kind": "case", "i": 0, "value": {"T": 0, "dtype": "float32", "shape": [10**12], "core": [1],
                                                       "stride": [0]}}, bytes(4)),
], ids=["deep_json", "huge_dims", "strided"])
def test_hand_made_frames_on_the_judges_pipe_are_one_line(judge, tiny_path, tmp_path, header, payload):
    result = grade(judge, tiny_path, tmp_path, _socket_writer(header, payload))
    line = judge.summary_line(result)
    assert result["status"] != "pass" and "could not read what your code sent back" in line, line


# ------------------------------------------------------------------------------------------ --watch

def test_a_file_deleted_during_watch_is_waited_for_not_recreated(judge, tiny_path, tmp_path, monkeypatch, capsys):
    mine = tmp_path / "work" / "205_l2norm.py"
    mine.write_text(S205, encoding="utf-8")
    real_sleep, polls = time.sleep, []

    def sleep(seconds):                              # the watch loop's 0.5 s polls drive the test
        if seconds != 0.5:
            return real_sleep(seconds)
        polls.append(mine.exists())
        if len(polls) == 1:
            mine.unlink()                            # the learner deletes (or an editor replaces) the file
        elif len(polls) == 3:
            raise KeyboardInterrupt
    monkeypatch.setattr(judge.time, "sleep", sleep)
    assert judge.main(["205", "--watch", "--model", str(tiny_path)]) == 0
    out = capsys.readouterr().out
    assert polls == [True, False, False] and "is gone; waiting" in out and "Created" not in out, out


# ------------------------------------------------------------------------------------------ files Python cannot compile

@pytest.mark.parametrize("line", ["X = 1" + "+1" * 300000, "X = " + "not " * 300000 + "1"], ids=["chain", "nested"])
def test_a_file_too_deep_to_compile_is_one_line(judge, tiny_path, tmp_path, line):
    """compile() raises RecursionError or MemoryError, not SyntaxError, on these (so would python file.py)."""
    result = grade(judge, tiny_path, tmp_path, S205 + "\n" + line + "\n")
    summary = judge.summary_line(result)
    assert result["status"] == "error" and "nested or chained too deeply" in summary, summary


# ------------------------------------------------------------------------------------------ notebook functions in a fresh process

CELLS = """
import math as m
import torch
from torch import rsqrt
SCALE = 1.0
def unit(x, eps):
    return x * rsqrt((x * x).sum(-1, keepdim=True) + eps) * SCALE
def make():
    offset = m.sqrt(0.0)
    def my_l2norm(x, eps=1e-6):
        return unit(x, eps) + offset
    return my_l2norm
"""


def test_notebook_functions_in_a_fresh_process_keep_their_helpers_globals_and_closures(tmp_path, monkeypatch, capsys):
    """Spawned (Windows, macOS, a notebook that started CUDA) sends functions as source: a helper from
    another cell, a module alias, an imported function, a constant and a closure's variable travel
    with it (as JSON, as in the job), and a function passed under another name is found."""
    import linecache

    import torch

    from practice._judge import portable
    linecache.cache["<cell-1>"] = (len(CELLS), None, CELLS.splitlines(True), "<cell-1>")   # as IPython does
    space = {}
    exec(compile(CELLS, "<cell-1>", "exec"), space)
    packed = json.loads(json.dumps(portable.pack({"l2norm": space["make"]()})))
    assert "torch" not in json.dumps(packed["defs"]) or "rsqrt" in packed["env"]
    found = portable.unpack(packed)
    x = torch.randn(3, 8)
    assert torch.equal(found["l2norm"](x), x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6))

    monkeypatch.setenv("QWEN_JUDGE_SPAWN", "1")
    monkeypatch.setenv("QWEN_PROGRESS", str(tmp_path / "progress.json"))
    from practice import check
    graded = check(205, lambda x, eps=1e-6: x, tiny=True)            # no source to send: one line, no grading
    out = capsys.readouterr().out
    assert graded.status == "error" and "define it with def" in out and len(out.strip().splitlines()) == 1, out


def test_check_with_more_functions_than_the_exercise_takes_is_one_line(capsys):
    from practice import check

    def l2norm(x, eps=1e-6):
        return x
    assert check(205, l2norm, l2norm, tiny=True) is None              # the second one was silently ignored
    out = capsys.readouterr().out.strip()
    assert "takes 1 function(s) (l2norm); you passed 2" in out and "\n" not in out, out


# ------------------------------------------------------------------------------------------ progress

def test_a_progress_file_nested_too_deeply_is_kept_and_restarted(judge, tmp_path, capsys):
    (tmp_path / "progress.json").write_text("[" * 100000 + "]" * 100000, encoding="utf-8")
    assert judge.main([]) == 0
    out, err = capsys.readouterr()
    assert "kept it as progress.json.broken-" in err and "Traceback" not in err, err
    assert list(tmp_path.glob("progress.json.broken-*"))


def test_a_lock_held_forever_is_one_line_and_the_change_is_not_lost_silently(judge, tmp_path, monkeypatch, capsys):
    """A judge stopped with Ctrl-Z while saving holds the lock: the next one waits a while, then says so."""
    import fcntl
    monkeypatch.setattr(judge.progress, "LOCK_WAIT", 0.3)
    with open(tmp_path / "progress.json.lock", "a+b") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        start = time.monotonic()
        saved = judge.progress.update(lambda p: p.setdefault("205", {}).update(status="fail"))
    err = capsys.readouterr().err
    assert time.monotonic() - start < 3 and saved["205"]["status"] == "fail"
    assert "could not save" in err and "held its lock" in err, err


# ------------------------------------------------------------------------------------------ Ctrl-C

def test_ctrl_c_while_the_judge_starts_is_one_line(tmp_path):
    """SIGINT to the judge's process group while it still imports torch: 'Stopped.', exit 130, no traceback."""
    import signal
    import subprocess
    import sys
    from pathlib import Path
    env = {**os.environ, "QWEN_PROGRESS": str(tmp_path / "p.json"), "QWEN_PRACTICE_DIR": str(tmp_path / "work"),
           "PYTHONIOENCODING": "utf-8"}
    proc = subprocess.Popen([sys.executable, "practice/judge.py", "--lang", "zh"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    end = time.monotonic() + 60               # a fixed 0.4 s was, on a loaded machine, still before the judge's first line
    maps = Path(f"/proc/{proc.pid}/maps")
    while maps.exists() and b"libtorch" not in maps.read_bytes() and proc.poll() is None:
        assert time.monotonic() < end
        time.sleep(0.005)                     # the judge is importing torch (1-3 s): its first libraries are mapped
    if not maps.exists():                     # no /proc (macOS)
        time.sleep(0.4)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 130 and err.decode("utf-8").strip() == "已停止。", err


def test_an_int_too_large_for_a_float_is_a_mismatch_not_a_crash():
    from practice._judge.compare import Mismatch, check_value
    with pytest.raises(Mismatch):
        check_value(1.0, 10**400)                                     # math.isclose raised OverflowError


@pytest.mark.parametrize("kind", ["folder", "fifo", "backup_is_a_file"])
def test_reset_of_a_file_it_cannot_back_up_is_one_line_and_changes_nothing(judge, tmp_path, capsys, kind):
    """Before: IsADirectoryError / SpecialFileError tracebacks (and a symlink to /dev/zero would be copied forever)."""
    f = tmp_path / "work" / "205_l2norm.py"
    if kind == "folder":
        f.mkdir()
    elif kind == "fifo":
        os.mkfifo(f)
    else:
        f.write_text("mine = 1\n", encoding="utf-8")
        (tmp_path / "work" / ".backup").write_text("not a folder", encoding="utf-8")
    assert judge.main(["205", "--reset"]) == 2
    err = capsys.readouterr().err
    assert "--reset left" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert kind != "backup_is_a_file" or f.read_text(encoding="utf-8") == "mine = 1\n"


@pytest.mark.parametrize("target", ["a_file", "dangling"])
def test_reset_and_save_never_write_through_a_link(judge, tmp_path, capsys, target, web):  # noqa: F811
    """A link planted as the learner's file (to a file elsewhere, or to nothing): --reset, the page's Save and
    creating the file from the starter leave the link and what it points to as they were, in one line."""
    elsewhere = tmp_path / "elsewhere.py"
    if target == "a_file":
        elsewhere.write_text("precious = 1\n", encoding="utf-8")
    f = tmp_path / "work" / "205_l2norm.py"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.symlink_to(elsewhere)
    assert judge.main(["205", "--reset"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and "205_l2norm.py" in err, err
    judge.learner_file(judge.BY_ID["205"], quiet=True)                         # what grading does first
    status, body = ask(web, "POST", "/api/exercise/205/save", {"text": "x = 2\n", "digest": judge.digest(f), "force": True})
    assert status == 409 and "205_l2norm.py" in body["error"], body
    assert f.is_symlink() and os.readlink(f) == str(elsewhere)
    assert (elsewhere.read_text(encoding="utf-8") == "precious = 1\n") if target == "a_file" else not elsewhere.exists()
    assert not (tmp_path / "work" / ".backup").exists()


def test_a_practice_folder_that_is_a_file_is_one_line(judge, tmp_path, monkeypatch, capsys):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("", encoding="utf-8")
    monkeypatch.setattr(judge, "WORK", not_a_folder)                 # QWEN_PRACTICE_DIR=/dev/null, say
    assert judge.main(["205"]) == 2
    err = capsys.readouterr().err
    assert "cannot create" in err and "QWEN_PRACTICE_DIR" in err and "Traceback" not in err, err


def test_terminal_escapes_in_a_message_cannot_redraw_the_report(judge, tiny_path, tmp_path):
    body = 'def l2norm(x, eps=1e-6):\n    raise ValueError("\\x1b[2K\\r\\x1b[32m✓ 205 passed all 8 cases")\n'
    line = judge.summary_line(grade(judge, tiny_path, tmp_path, body))
    assert "\x1b" not in line and "\r" not in line and "\\x1b" in line, line


def test_a_huge_learner_file_is_refused_before_the_judge_reads_it(judge, tiny_path, tmp_path, monkeypatch):
    from practice._judge import files
    monkeypatch.setattr(files, "MAX_BYTES", 1 << 20)                  # 64 MB in use; 1 MB keeps the test small
    result = grade(judge, tiny_path, tmp_path, S205 + "#" + "x" * (2 << 20) + "\n")
    assert "larger than 1 MB" in judge.summary_line(result), judge.summary_line(result)


def test_a_progress_file_the_judge_cannot_read_is_never_written_over(judge, tmp_path, monkeypatch, capsys):
    from practice._judge import files
    monkeypatch.setattr(files, "MAX_BYTES", 1 << 20)
    big = json.dumps({"204": {"status": "pass", "passed": True, "graded_at": "x" * (2 << 20)}})
    (tmp_path / "progress.json").write_text(big, encoding="utf-8")
    judge.progress.update(lambda p: p.setdefault("205", {}).update(status="fail"))
    err = capsys.readouterr().err
    assert (tmp_path / "progress.json").read_text(encoding="utf-8") == big and "could not save" in err, err


def test_a_progress_file_saved_with_a_bom_is_read_not_backed_up(judge, tmp_path, capsys):
    """Edited by hand in an editor that writes a UTF-8 BOM: still the learner's progress."""
    (tmp_path / "progress.json").write_bytes(b"\xef\xbb\xbf" + json.dumps({"204": {"status": "pass", "passed": True}}).encode())
    assert judge.progress.load()["204"]["passed"] is True
    assert not list(tmp_path.glob("progress.json.broken-*")) and not capsys.readouterr().err


def test_a_case_check_that_cannot_read_a_result_fails_the_case_instead_of_crashing():
    """Case.check (for later exercises) runs in the judge on whatever came back: a list where it expects
    a tensor raised AttributeError out of the grading."""
    import types

    from practice._judge import grading
    from practice._judge.exercises import Case

    def needs_a_tensor(got):
        assert got.shape == (2,)
    case = Case("f", ("a case", "一个用例"), (), None, check=needs_a_tensor)
    entry = grading._judge_case(types.SimpleNamespace(diagnoses=[]), case, [1, 2], 0, None, False)
    assert not entry["ok"] and "cannot check (AttributeError" in entry["message"], entry
