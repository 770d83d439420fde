"""practice/judge.py --web under attack: attacks on the page's server.

Each test is one finding, sent with the standard library (or raw sockets where http.client is too
polite), and checks the refusal or the survival, and that nothing ran."""
import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest

from conftest import ROOT
from test_web import ask, learner, web  # noqa: F401 - the served page, in this process


@pytest.fixture
def served(tmp_path):
    """`python practice/judge.py --web` as the learner starts it (its own process, its own signals):
    (process, port, token)."""
    env = {**os.environ, "QWEN_PRACTICE_DIR": str(tmp_path / "work"), "QWEN_PROGRESS": str(tmp_path / "progress.json"),
           "PYTHONIOENCODING": "utf-8", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "practice/judge.py", "--web", "--no-browser", "--tiny", "--port", "0"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8")
    try:
        port, token = re.search(r":(\d+)/\?token=(\S+)", proc.stdout.readline()).groups()
        yield proc, int(port), token
    finally:
        proc.kill()
        proc.wait(10)


def test_a_page_that_goes_away_before_its_answer_leaves_the_server_running(served):
    """A reload during Run closes the connection before the answer: writing to it raised SIGPIPE, whose
    default action (engine.cli sets it for `| head`) killed the server without a word."""
    proc, port, token = served
    for _ in range(5):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(f"GET /api/ui HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Token: {token}\r\n\r\n".encode())
        s.close()                                                 # gone before the answer
        time.sleep(0.1)
    assert proc.poll() is None, f"the server died (exit {proc.returncode})"
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(f"GET /api/ui HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Token: {token}\r\nConnection: close\r\n\r\n".encode())
    answer = b""
    while chunk := s.recv(65536):
        answer += chunk
    s.close()
    assert answer.startswith(b"HTTP/1.1 200"), answer[:80]
    proc.kill()
    assert "Traceback" not in proc.communicate(timeout=10)[1]     # nor a traceback in the learner's terminal


def raw_exchange(app, data):
    """Every byte the server answers to `data` (then our end of the connection is shut: no more comes)."""
    s = socket.create_connection(("127.0.0.1", app.port), timeout=20)
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    answer = b""
    while chunk := s.recv(65536):
        answer += chunk
    s.close()
    return answer


def request(app, method, path, body=b"", extra=b"", length=None):
    head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{app.port}\r\nX-Token: {app.token}\r\n"
            f"Content-Type: application/json\r\n").encode()
    size = f"Content-Length: {len(body) if length is None else length}\r\n".encode() if length != "" else b""
    return head + size + extra + b"\r\n" + body


@pytest.mark.parametrize("what, make, status, says", [
    ("a Content-Length of a digit that is not ASCII ('²')",
     lambda app: request(app, "POST", "/api/exercise/204/keep", b"{}", length="\xb2"
                         ).replace("²".encode("utf-8"), b"\xb2"), 411, "Content-Length"),
    ("a body shorter than its Content-Length",
     lambda app: request(app, "POST", "/api/exercise/204/keep", b'{"text": "a"}', length=100), 400, "ended before"),
    ("JSON nested past Python's recursion limit",
     lambda app: request(app, "POST", "/api/exercise/204/keep", b"[" * 100000 + b"]" * 100000), 400, "not JSON"),
    ("a text with a lone surrogate (keep)",
     lambda app: request(app, "POST", "/api/exercise/204/keep", b'{"text": "\\ud800"}'), 400, "surrogate"),
    ("a text with a lone surrogate (save)",
     lambda app: request(app, "POST", "/api/exercise/204/save", b'{"text": "\\ud800", "digest": ""}'), 400, "surrogate"),
    ("chunked and a Content-Length",
     lambda app: request(app, "POST", "/api/exercise/204/keep", b'2\r\n{}\r\n0\r\n\r\n',
                         extra=b"Transfer-Encoding: chunked\r\n"), 411, "Content-Length"),
])
def test_a_malformed_body_is_one_line_and_nothing_is_written(web, judge, tmp_path, what, make, status, says):  # noqa: F811
    """Before: '²'.isdigit() reached int() (500 ValueError), a short body was taken as the whole one,
    [[[[… and "\\ud800" were 500s with a Python exception's text."""
    answer = raw_exchange(web, make(web))
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status}".encode()), (what, answer[:300])
    assert says in json.loads(payload)["error"], (what, payload)
    assert web.actions == 0 and not judge.WORK.exists() and not (tmp_path / "progress.json").exists()


def test_a_body_on_a_request_that_takes_none_never_reads_as_a_second_request(web, judge):  # noqa: F811
    """A GET's body was left in the connection and read as the next request (here: a keep that writes)."""
    inner = request(web, "POST", "/api/exercise/204/keep", b'{"text": "smuggled"}')
    answer = raw_exchange(web, request(web, "GET", "/api/ui", inner))
    assert answer.count(b"HTTP/1.1 ") == 1 and answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert not (judge.WORK / ".backup").exists()


@pytest.mark.parametrize("where", ["page", "terminal"])
def test_a_file_saved_while_it_is_graded_shows_as_edited_since(web, judge, monkeypatch, capsys, where):  # noqa: F811
    """Ctrl-S works during Run (and another editor may save): the progress took the file's digest after
    the grading, so the list called the new text the graded one (no "(edited)")."""
    ask(web, "GET", "/api/exercise/204")
    path = learner(judge, "204")
    from helpers import edit_after_grading
    edit_after_grading(monkeypatch, judge, "# saved while the grading ran\n", path)
    if where == "page":
        status, report = ask(web, "POST", "/api/exercise/204/run")
        assert status == 200 and report["status"] == "todo", report["status"]
    else:
        judge.main(["204"])
        capsys.readouterr()
    row = next(r for r in ask(web, "GET", "/api/list")[1]["exercises"] if r["id"] == "204")
    assert row["status"] == "todo*" and "(edited)" in row["label"], row


def test_two_saves_at_once_never_overwrite_each_other_silently(web, judge, monkeypatch):  # noqa: F811
    """Two tabs on one exercise, both loaded at digest D: each save checked D and then wrote, so the
    second check could pass before the first write landed, and one tab's text was gone without a word."""
    import threading

    from practice._judge import web as webmod
    status, ex = ask(web, "GET", "/api/exercise/204")
    path = learner(judge, "204")
    writing, real = threading.Event(), webmod.write_atomic

    def slow_write(where, data):
        writing.set()
        time.sleep(0.5)                                           # the first tab's write is still on its way
        real(where, data)
    monkeypatch.setattr(webmod, "write_atomic", slow_write)
    answers = {}
    first = threading.Thread(target=lambda: answers.update(
        a=ask(web, "POST", "/api/exercise/204/save", {"text": "# tab A\n", "digest": ex["digest"]})))
    first.start()
    assert writing.wait(10)
    answers["b"] = ask(web, "POST", "/api/exercise/204/save", {"text": "# tab B\n", "digest": ex["digest"]})
    first.join(20)
    statuses = sorted(a[0] for a in answers.values())
    assert statuses == [200, 409], answers                        # one saved, the other told the file changed
    saved = next(k for k, a in answers.items() if a[0] == 200)
    assert path.read_text(encoding="utf-8") == f"# tab {saved.upper()}\n"


def test_reset_of_a_file_deleted_on_disk_is_the_judges_line_and_keeps_the_page(web, judge):  # noqa: F811
    """The file was deleted in another window: --reset says there is nothing to reset; the page got a
    'cannot read' error about a file the judge had told it nothing of."""
    ask(web, "GET", "/api/exercise/204")
    learner(judge, "204").unlink()
    status, body = ask(web, "POST", "/api/exercise/204/reset")
    assert status == 409 and "nothing to reset" in body["error"], body
    assert not learner(judge, "204").exists() and not (judge.WORK / ".backup").exists()
