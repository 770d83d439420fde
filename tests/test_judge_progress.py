"""The judge never loses progress: locked atomic writes, broken files backed up, unwritable paths survived."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

SOLUTIONS = ROOT / "practice" / "_judge" / "solutions"


WRITER = """
import sys
sys.path.insert(0, {root!r})
from practice._judge import progress
for i in range(40):
    progress.update(lambda p, i=i: p.setdefault({who!r} + str(i), {{"status": "pass", "passed": True}}))
"""


def test_two_writers_at_once_keep_every_result(tmp_path):
    env = {**os.environ, "QWEN_PROGRESS": str(tmp_path / "progress.json")}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER.format(root=str(ROOT), who=who)], env=env)
             for who in ("a", "b")]
    assert [p.wait(60) for p in procs] == [0, 0]
    saved = json.loads((tmp_path / "progress.json").read_text(encoding="utf-8"))
    assert len(saved) == 80                                                 # no update lost
    assert not list(tmp_path.glob("*.tmp"))                                 # no temporary file left behind


@pytest.mark.parametrize("content", ["{not json", "[1, 2, 3]", "null", '{"204": 5}', '{"204": {"status": "great"}}',
                                     '{"204": {"hints": "x"}}', b"\xff\xfe{}"])
def test_a_broken_progress_file_is_kept_reported_and_restarted(judge, capsys, tmp_path, tiny_path, content):
    file = tmp_path / "progress.json"
    file.write_bytes(content if isinstance(content, bytes) else content.encode())
    code = judge.main(["205", "--file", str(SOLUTIONS / "s205.py"), "--model", str(tiny_path)])
    out = capsys.readouterr()
    assert code == 0 and "passed all 8 cases" in out.out                   # grading is not disturbed
    code = judge.main([])                                                   # the listing reads the file
    out = capsys.readouterr()
    assert code == 0 and "Traceback" not in out.err
    lines = [line for line in out.err.splitlines() if "progress.json" in line]
    assert len(lines) == 1 and "kept it as progress.json.broken-" in lines[0]
    backups = list(tmp_path.glob("progress.json.broken-*"))
    assert len(backups) == 1 and backups[0].read_bytes() == (content if isinstance(content, bytes) else content.encode())
    judge.main(["205", "--hint", "--tiny"])                                 # and a fresh one is started
    capsys.readouterr()
    assert json.loads(file.read_text(encoding="utf-8"))["205"]["hints"] == 1


@pytest.mark.parametrize("where", ["folder", "impossible"])
def test_an_unwritable_progress_path_is_one_line_and_the_report_is_still_shown(judge, capsys, tmp_path, tiny_path,
                                                                               monkeypatch, where):
    target = tmp_path if where == "folder" else os.path.join(os.devnull, "sub", "progress.json")
    monkeypatch.setenv("QWEN_PROGRESS", str(target))
    code = judge.main(["205", "--model", str(tiny_path)])
    out = capsys.readouterr()
    assert code == 1 and "not finished" in out.out and "Traceback" not in out.err
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "could not save to" in lines[0] and "QWEN_PROGRESS" in lines[0]


def test_the_report_is_printed_before_progress_is_saved(judge, capsys, tmp_path, tiny_path, monkeypatch):
    from practice._judge import progress
    order = []
    real = progress.update
    monkeypatch.setattr(progress, "update", lambda change: (order.append(capsys.readouterr().out), real(change))[1])
    judge.main(["205", "--model", str(tiny_path)])
    assert order and "not finished" in order[0]
