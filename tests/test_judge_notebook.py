"""practice.check: grading functions defined in notebook cells, HTML in Jupyter, text elsewhere."""
import json

import pytest

from conftest import ROOT

WRONG = '''import torch
import torch.nn.functional as F

def rms_norm(x, weight, eps=1e-6):
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)

def gated_rms_norm(x, gate, weight, eps=1e-6):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (weight.float() * h * F.silu(gate.float())).to(x.dtype)
'''
RIGHT = WRONG.replace("* weight.float()).to(x.dtype)\n\ndef", "* (1 + weight.float())).to(x.dtype)\n\ndef")


def test_check_outside_jupyter_prints_text_and_records_progress(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("QWEN_PROGRESS", str(tmp_path / "progress.json"))
    import linecache
    from practice import check
    space = {}
    for name, source in (("<cell-1>", WRONG), ("<cell-2>", RIGHT)):     # a cell's source, where IPython keeps it
        linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    exec(compile(WRONG, "<cell-1>", "exec"), space)
    graded = check(204, space["rms_norm"], space["gated_rms_norm"], tiny=True)
    out = capsys.readouterr().out
    assert graded.status == "fail" and "the `1 +` is missing" in out and "<" not in out.splitlines()[0]
    exec(compile(RIGHT, "<cell-2>", "exec"), space)
    graded = check(204, gated_rms_norm=space["gated_rms_norm"], rms_norm=space["rms_norm"], tiny=True)
    assert graded.passed and "passed all 15 cases" in capsys.readouterr().out
    assert json.loads((tmp_path / "progress.json").read_text(encoding="utf-8"))["204"]["passed"] is True


def test_check_names_a_missing_function_in_one_line(capsys):
    from practice import check
    assert check(204, lambda x, w, eps=1e-6: x, tiny=True) is None
    out = capsys.readouterr().out.strip()
    assert out.startswith("check: check(204, ...) needs rms_norm, gated_rms_norm: missing gated_rms_norm")


def test_a_notebook_fails_then_passes_204(tmp_path, tiny_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(f"import os, sys\nsys.path.insert(0, {str(ROOT)!r})\n"
                                  f"os.environ['QWEN_PROGRESS'] = {str(tmp_path / 'progress.json')!r}\n"
                                  f"os.environ['QWEN_MODEL'] = {str(tiny_path)!r}\nfrom practice import check"),
        nbformat.v4.new_code_cell(WRONG + "\ncheck(204, rms_norm, gated_rms_norm)"),
        nbformat.v4.new_code_cell(RIGHT + "\ncheck(204, rms_norm, gated_rms_norm)"),
    ]
    nbclient.NotebookClient(nb, timeout=60, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()

    def html(cell):
        return "".join(o.get("data", {}).get("text/html", "") for o in cell.outputs)
    failed, passed = html(nb.cells[1]), html(nb.cells[2])
    assert "data-status='fail'" in failed and "looks like the `1 +` is missing" in failed
    assert "data-status='pass'" in passed and "passed all 15 cases" in passed
    assert not any(o.get("output_type") == "error" for c in nb.cells for o in c.outputs)
    saved = json.loads((tmp_path / "progress.json").read_text(encoding="utf-8"))
    assert saved["204"]["passed"] is True
