"""practice/judge.py --web under attack: what an attacker's review of the page's server found.

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
    default action (qwen.cli sets it for `| head`) killed the server without a word."""
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
