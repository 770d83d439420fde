"""What a graded solution can reach of the judge and its page.

A hostile solution looks at import and reports what it found as the text of an exception, so the
judge's own one-line report carries it back: the page's token in its memory, the page's app, the
judge's environment. Oversized frames on its result pipe are refused before they are decoded, and
killing the judge ends the sandbox."""
import json
import os
import signal
import subprocess
import sys

import pytest

from conftest import ROOT
from helpers import frame_writer
from test_web import ask, learner, web  # noqa: F401 - the served page, in this process

REACH = '''
import gc, hashlib, json, os

def _tokens():
    """Objects that look like the page's app, and whether any string held in a dict, list or tuple is the
    token (known here by its digest only, to tell the test)."""
    found, apps = False, 0
    for o in gc.get_objects():
        if type(o).__name__ == "App" and hasattr(o, "token"):
            apps += 1
        values = o.values() if isinstance(o, dict) else o if isinstance(o, (list, tuple)) else ()
        for v in values:
            if type(v) is str and len(v) == 32 and hashlib.sha256(v.encode()).hexdigest() == TOKEN:
                found = True
    return apps, found

apps, token = _tokens()
SEEN = {
    "apps": apps, "token": token,
    "env": sorted(k for k in os.environ if k in ("SSH_AUTH_SOCK", "HF_TOKEN", "QWEN_PROGRESS", "DBUS_SESSION_BUS_ADDRESS")),
}
raise RuntimeError("SEEN" + json.dumps(SEEN, separators=(",", ":")) + "SEEN")
'''


@pytest.fixture
def fresh_server(monkeypatch):
    """Sandbox processes started now, so that what the test put in the environment was there when it started."""
    from practice._judge import sandbox
    monkeypatch.setattr(sandbox, "_ahead", [])
    yield
    for process in sandbox._ahead:
        process.stop()


def seen(line):
    assert "SEEN" in line, line
    return json.loads(line.split("SEEN")[1])


def test_a_solution_graded_from_the_page_holds_nothing_of_the_judge(web, judge, monkeypatch, tmp_path,  # noqa: F811
                                                                    fresh_server):
    """The page's server writes the learner's files for anyone with its token: the sandbox never holds it
    (a fresh process of its own) and is not given the judge's secrets in its environment."""
    monkeypatch.setenv("SSH_AUTH_SOCK", str(tmp_path / "agent.sock"))
    monkeypatch.setenv("HF_TOKEN", "hf_" + "x" * 29)
    ask(web, "GET", "/api/exercise/204")
    ask(web, "GET", "/api/exercise/205")
    other = learner(judge, "205").read_text(encoding="utf-8")
    import hashlib
    learner(judge, "204").write_text(f"TOKEN = {hashlib.sha256(web.token.encode()).hexdigest()!r}\n" + REACH,
                                     encoding="utf-8")
    status, report = ask(web, "POST", "/api/exercise/204/run")
    assert status == 200, report
    found = seen(report["lines"][0])
    assert found["apps"] == 0 and found["token"] is False, found                    # nothing of the server's
    assert found["env"] == [], found
    assert learner(judge, "205").read_text(encoding="utf-8") == other
    assert not (judge.WORK / ".backup").exists()
    status, _ = ask(web, "GET", "/api/list")                                          # the page still answers
    assert status == 200


def test_a_huge_frame_header_does_not_grow_the_judge(tmp_path):
    """3 million empty lists in one 27 MB header decoded to about a gigabyte in the judge: now refused
    before it is decoded. Measured as the judge process's own peak memory, against a passing grading."""
    import struct
    head = b'{"blobs": [], "kind": "case", "i": 0, "value": {"L": [' + b",".join([b'{"L": []}'] * 3_000_000) + b"]}}"
    frame = struct.pack("<QI", 4 + len(head), len(head)) + head
    hostile, good = tmp_path / "hostile.py", tmp_path / "good.py"
    hostile.write_text(frame_writer(frame), encoding="utf-8")
    good.write_text((ROOT / "practice" / "_judge" / "solutions" / "s205.py").read_text(encoding="utf-8"), encoding="utf-8")
    script = ("import resource, sys, json\nsys.path.insert(0, %r)\nimport practice.judge as judge\n"
              "from engine.tiny import tiny_model_path\nimport torch\nmodel = tiny_model_path()\nrows = []\n"
              "for f in sys.argv[1:]:\n"
              "    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
              "    r = judge.grade(judge.BY_ID['205'], f, model)\n"
              "    rows.append([r['status'], judge.summary_line(r), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before])\n"
              "print(json.dumps(rows))\n") % str(ROOT)
    env = {**os.environ, "QWEN_PROGRESS": str(tmp_path / "p.json"), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", script, str(good), str(hostile)], capture_output=True, text=True,
                       env=env, timeout=110)
    (good_status, _, _), (status, line, grown_kb) = json.loads(r.stdout.strip().splitlines()[-1])
    assert good_status == "pass" and status != "pass" and "could not read what your code sent back" in line, line
    assert grown_kb < 150 * 1024, f"the judge grew by {grown_kb / 1024:.0f} MB"


def test_results_beyond_the_grading_total_end_it(judge, tiny_path, tmp_path, monkeypatch):
    """Each result within wire.MAX_RESULT, but more than wire.MAX_TOTAL together: one line, not the judge's
    memory (the total made small here: it is counted in the judge's process)."""
    from practice._judge import wire
    monkeypatch.setattr(wire, "MAX_TOTAL", 8 << 20)
    f = tmp_path / "big.py"
    f.write_text("import torch\ndef l2norm(x, eps=1e-6):\n    return torch.zeros(3 << 18)\n", encoding="utf-8")
    result = judge.grade(judge.BY_ID["205"], f, tiny_path)
    stopped = [c["message"] for c in result["cases"] if c.get("stopped")]
    assert result["status"] == "fail" and stopped and f"{wire.MAX_TOTAL >> 20} MB of results" in stopped[0], result["cases"]


def test_the_sandbox_runs_no_process_outside_its_limits_when_the_judge_is_killed(tmp_path):
    """Killing the judge (kill -9, a closed terminal) ends its sandbox too: an endless solution does not
    outlive it."""
    import time
    pidfile = tmp_path / "pid"
    f = tmp_path / "endless.py"
    f.write_text(f"import os\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\nwhile True:\n    pass\n", encoding="utf-8")
    env = {**os.environ, "QWEN_PROGRESS": str(tmp_path / "p.json"),
           "QWEN_PRACTICE_DIR": str(tmp_path / "work")}
    proc = subprocess.Popen([sys.executable, str(ROOT / "practice" / "judge.py"), "205", "--file", str(f), "--tiny"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = time.monotonic() + 60
    while not pidfile.exists() and time.monotonic() < end:
        time.sleep(0.05)
    child = int(pidfile.read_text())
    proc.kill()
    proc.wait()
    end = time.monotonic() + 5
    while time.monotonic() < end:
        try:
            os.kill(child, 0)
            with open(f"/proc/{child}/stat", "rb") as s:
                if s.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    break
        except OSError:
            break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the sandbox outlived the judge")
