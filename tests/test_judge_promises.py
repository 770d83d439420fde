"""What the judge promises, held to it: statements and the in-place check agree; the sandbox is not told
where the progress file is; what a new learner meets (--all, --reset, a report shown again in a later
notebook cell, no tqdm warning) says what it does."""
import json
import os
import sys
import types

import pytest

from conftest import ROOT

SOLUTIONS = ROOT / "practice" / "_judge" / "solutions"
S205 = (SOLUTIONS / "s205.py").read_text(encoding="utf-8")


def grade(judge, tiny_path, tmp_path, ex_id, body, name="mine.py"):
    f = tmp_path / name
    f.write_text(body, encoding="utf-8")
    return judge.grade(judge.BY_ID[ex_id], f, tiny_path)


# ------------------------------------------------------------------------------------------ in place

def test_each_statement_says_whether_its_inputs_may_change(judge):
    for ex in judge.EXERCISES:
        if not ex.needs_torch:
            continue
        text = ex.starter.read_text(encoding="utf-8")
        if ex.may_modify_inputs:
            assert "in place is allowed" in text and "可以原地修改" in text, ex.id
            assert "Do not modify the inputs" not in text, ex.id
        else:
            assert "Do not modify the inputs." in text and "不要修改输入。" in text, ex.id
    assert {e.id for e in judge.EXERCISES if e.may_modify_inputs} == {"208", "230", "231", "232"}


IN_PLACE = {
    "232": "import torch\ndef top_p_filter(logits, p):\n    ordered, order = logits.sort(-1, descending=True)\n"
           "    probs = ordered.softmax(-1)\n    drop = (probs.cumsum(-1) - probs) >= p\n"
           "    remove = torch.zeros_like(drop).scatter_(-1, order, drop)\n"
           "    logits[remove] = float('-inf')\n    return logits\n",
    "230": (SOLUTIONS / "s230.py").read_text(encoding="utf-8").replace(
        "    x = x + rms_norm(x, norm1_weight, eps) @ mixer_weight.T", "    x += rms_norm(x, norm1_weight, eps) @ mixer_weight.T"),
}


@pytest.mark.parametrize("ex_id", sorted(IN_PLACE))
def test_an_in_place_solution_passes_where_the_statement_allows_it(judge, tiny_path, tmp_path, ex_id):
    assert "+=" in IN_PLACE["230"]
    result = grade(judge, tiny_path, tmp_path, ex_id, IN_PLACE[ex_id])
    assert result["status"] == "pass", judge.summary_line(result)


def test_patching_torch_equal_in_the_sandbox_does_not_hide_an_in_place_change(judge, tiny_path, tmp_path):
    """The inputs after the call are compared in the judge's process, with its own copy."""
    body = ("import torch\ntorch.equal = lambda *a, **k: True\ntorch.Tensor.equal = lambda *a, **k: True\n"
            "def l2norm(x, eps=1e-6):\n    return x.mul_(torch.rsqrt((x * x).sum(-1, keepdim=True) + eps))\n")
    result = grade(judge, tiny_path, tmp_path, "205", body)
    assert result["status"] == "fail" and "modified its input x (#1) in place" in judge.summary_line(result)


# ------------------------------------------------------------------------------------------ what the sandbox reaches

def test_the_sandbox_is_not_told_where_the_progress_file_is(judge, tiny_path, tmp_path):
    body = "import os\ndef l2norm(x, eps=1e-6):\n    raise RuntimeError('progress=' + str(os.environ.get('QWEN_PROGRESS')))\n"
    result = grade(judge, tiny_path, tmp_path, "205", body)
    assert "progress=None" in judge.summary_line(result)


# ------------------------------------------------------------------------------------------ a new learner

def test_all_on_a_fresh_folder_creates_nothing_and_records_nothing(judge, capsys, tmp_path, tiny_path):
    (tmp_path / "work").mkdir()
    assert judge.main(["--all", "--model", str(tiny_path)]) == 0
    out = capsys.readouterr().out
    assert list((tmp_path / "work").iterdir()) == [] and not (tmp_path / "progress.json").exists()
    assert "Not started, so not graded: 201, 202" in out
    assert judge.main(["--all", "--json", "--model", str(tiny_path)]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_reset_of_an_exercise_never_started_creates_nothing(judge, capsys, tmp_path):
    """It created the starter and said 'is the starter again', and --all then graded it as 'not finished'."""
    (tmp_path / "work").mkdir()
    assert judge.main(["204", "--reset"]) == 0
    assert "does not exist yet: nothing to reset" in capsys.readouterr().out
    assert list((tmp_path / "work").iterdir()) == [] and not (tmp_path / "progress.json").exists()


def test_reset_after_a_pass_says_the_starter_was_restored(judge, capsys, tmp_path, tiny_path):
    mine = tmp_path / "work" / "205_l2norm.py"
    mine.parent.mkdir()
    mine.write_text(S205, encoding="utf-8")
    assert judge.main(["205", "--model", str(tiny_path)]) == 0
    assert judge.main(["205", "--reset"]) == 0
    capsys.readouterr()
    judge.main([])
    row = next(line for line in capsys.readouterr().out.splitlines() if " 205 " in line)
    assert "✓" in row and "starter restored, passed before" in row and "not started" not in row, row
    judge.main(["--lang", "zh"])
    row = next(line for line in capsys.readouterr().out.splitlines() if " 205 " in line)
    assert "已恢复为起始文件，曾经通过" in row, row


class _Shell:
    kernel = None
    config = {}
    execution_count = 7


def test_a_report_evaluated_in_a_later_cell_is_shown_again(monkeypatch, tmp_path, capsys):
    from practice import check
    monkeypatch.setenv("QWEN_PROGRESS", str(tmp_path / "progress.json"))
    shell = _Shell()
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    from practice._judge.solutions.s205 import l2norm
    report = check(205, l2norm, tiny=True, lang="en")
    capsys.readouterr()
    report._ipython_display_()                                  # the same cell: check() has just shown it
    assert capsys.readouterr().out == ""
    shell.execution_count = 8
    report._ipython_display_()                                  # a later cell: the report again
    out = capsys.readouterr().out
    assert "✓ 205" in out and "passed all 8 cases" in out
    assert str(report).splitlines()[0] == out.splitlines()[0] and repr(report) == "<check 205: pass>"


FAKE_JUPYTER = """
import sys, types
shell = types.SimpleNamespace(config={"IPKernelApp": {}}, kernel=None, execution_count=1)
sys.modules["IPython"] = types.SimpleNamespace(get_ipython=lambda: shell)
sys.modules["ipykernel.zmqshell"] = types.ModuleType("ipykernel.zmqshell")    # how tqdm.autonotebook tells Jupyter
from practice import check
from practice._judge.solutions.s205 import l2norm
report = check(205, l2norm, lang="en")
print("status", report.status)
"""


def test_check_in_a_notebook_prints_no_tqdm_warning(tmp_path):
    """Looking for the model in the Hugging Face cache imports huggingface_hub, whose tqdm.auto warns
    in Jupyter ('IProgress not found' without ipywidgets, 'notebook mode' with them)."""
    env = {k: v for k, v in os.environ.items() if k not in ("QWEN_TINY", "QWEN_MODEL")}
    env.update(QWEN_PROGRESS=str(tmp_path / "progress.json"), HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1",
               OMP_NUM_THREADS="1", PYTHONIOENCODING="utf-8")
    from forkserver import python                 # a process of its own, forked after `import torch` (before
    run = python(["-c", FAKE_JUPYTER], cwd=ROOT, env=env, timeout=120)     # tqdm.auto and huggingface_hub)
    assert "status pass" in run.stdout, run.stdout + run.stderr
    assert "IProgress" not in run.stderr and "notebook mode" not in run.stderr and "Warning" not in run.stderr, run.stderr


def test_the_readme_says_what_the_sandbox_prevents_and_what_it_does_not(judge):
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    flat = " ".join(text.split())
    allowed = sorted(e.id for e in judge.EXERCISES if e.may_modify_inputs)
    assert f"({', '.join(allowed[:-1])} and {allowed[-1]} allow it;" in flat and f"（{'、'.join(allowed[:-1])} 和 {allowed[-1]} 可以；" in text
    for claim in ("never in the sandbox", "never pickle", "`--solution`", "it fools only you", "`SSH_AUTH_SOCK`",
                  "它骗到的只有你自己", "starter restored"):
        assert claim in flat, claim
    for once in ("The judge never changes your file", "`python practice/judge.py --verify` proves",
                 "Progress lives outside the code", "the largest absolute"):
        assert flat.count(once) == 1, once
