"""practice/judge.py: the checks can pass and fail, every kind of learner mistake is one clear line,
known mistakes are named, and the commands (list, grade, hint, solution, reset, watch) work."""
import json
import os
import queue
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT

SOLUTIONS = ROOT / "practice" / "_judge" / "solutions"


def main(judge, capsys, *args):
    """judge.main in this process (fast); returns (exit code, stdout, stderr)."""
    code = judge.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


# Each grading is a fresh process, so a group holds about 25 of them (one test's time limit).
VERIFY_GROUPS = ["204,205,206", "201,202,203,207", "208,209", "220,221,222", "230,231", "232,240", "241,242", "250,260",
                 "270,271", "272,273"]


@pytest.mark.parametrize("group", VERIFY_GROUPS)
def test_verify_proves_the_checks(run_script, tmp_path, tiny_path, group):
    """--verify in groups (spread over the test workers), which together hold every exercise: every
    reference, starter, equivalent form and known mistake of the group is graded, as it should be."""
    from practice._judge.exercises import BY_ID, JUDGE
    assert sorted(",".join(VERIFY_GROUPS).split(",")) == sorted(BY_ID)
    env = {"QWEN_PROGRESS": str(tmp_path / "p.json"), "QWEN_PRACTICE_DIR": str(tmp_path / "w")}
    r = run_script("practice/judge.py", "--verify", group, "--model", tiny_path, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith(("ok", "FAIL"))]
    assert all(line.startswith("ok") for line in lines) and "0 problem(s)" in r.stdout
    assert {line.split()[1] for line in lines} == set(group.split(","))      # every exercise of the group, only those
    for kind in ("equivalent", "wrong"):                                       # every other form and mistake on disk
        files = sum(len(list((JUDGE / kind).glob(f"{i}_*.py"))) for i in group.split(","))
        assert sum(f"{kind}/" in line for line in lines) == files, kind
    if group == VERIFY_GROUPS[0]:
        for named in ("the `1 +` is missing", "1 + w was computed in bf16", "gate was applied before the norm",
                      "mean was taken over the wrong dimension", "mean was subtracted first", "standard deviation",
                      "divided by n - 1", "F.normalize", "unbiased variance"):
            assert named in r.stdout, named


def test_verify_of_an_unknown_exercise_is_one_line(judge, capsys):
    code = judge.main(["--verify", "240,999"])
    err = capsys.readouterr().err
    assert code != 0 and "there is no exercise 999" in err and "Traceback" not in err


def _grade_body(judge, tmp_path, ex_id, body, name="mine.py"):
    f = tmp_path / name
    f.write_text(body, encoding="utf-8") if isinstance(body, str) else f.write_bytes(body)
    from practice._judge.exercises import BY_ID
    from engine.tiny import tiny_model_path
    return judge.grade(BY_ID[ex_id], f, tiny_model_path())


MISTAKES = {  # file body for exercise 205 (l2norm) -> what the one-line report must say
    "syntax": ("def l2norm(x, eps=1e-6)\n    return x\n", "syntax error on line 1"),
    "import": ("import numpy_that_does_not_exist\n", "import failed"),
    "missing": ("def l2_norm(x, eps=1e-6):\n    return x\n", "no function named l2norm"),
    "return_type": ("def l2norm(x, eps=1e-6):\n    return x.tolist()\n", "returned list, expected a tensor"),
    "nan": ("def l2norm(x, eps=1e-6):\n    return x / (x - x).sum(-1, keepdim=True)\n", "NaN or inf in your output"),
    "in_place": ("import torch\ndef l2norm(x, eps=1e-6):\n    return x.mul_(torch.rsqrt((x * x).sum(-1, keepdim=True) + eps))\n",
                 "modified its input x (#1) in place"),
    "in_place_odd_callable": ("class F:\n    @property\n    def __signature__(self):\n        raise RuntimeError('no')\n"
                              "    def __call__(self, x, eps=1e-6):\n        return x.mul_(2)\nl2norm = F()\n",
                              "modified its input #1 in place"),
    "exit_at_import": ("import sys\nsys.exit(0)\n", "calls sys.exit()"),
    "exit_in_function": ("import sys\ndef l2norm(x, eps=1e-6):\n    sys.exit(3)\n", "called sys.exit()"),
    "os_exit": ("import os\ndef l2norm(x, eps=1e-6):\n    os._exit(0)\n", "your code ended the process (os._exit(0))"),
    "exception": ("def l2norm(x, eps=1e-6):\n    y = x * 2\n    return y / undefined_name\n",
                  "NameError: name 'undefined_name' is not defined (line 3 of your file)"),
    "huge_allocation": ("import torch\ndef l2norm(x, eps=1e-6):\n    return torch.empty(10**11)\n", "more memory than the"),
    "killed": ("import os\nos.kill(os.getpid(), 9)\n", "killed by signal 9"),
    "meta": ("import torch\ndef l2norm(x, eps=1e-6):\n    return x.to('meta')\n", "meta device"),
    "sparse": ("def l2norm(x, eps=1e-6):\n    return x.reshape(-1, x.shape[-1]).to_sparse()\n", "sparse tensor"),
    "subclass": ("import torch\nclass Mine(torch.Tensor):\n    pass\ndef l2norm(x, eps=1e-6):\n    return x.as_subclass(Mine)\n",
                 "tensor subclass (Mine)"),
    "bad_str": ("class Odd(Exception):\n    def __str__(self):\n        raise RuntimeError('no')\n"
                "def l2norm(x, eps=1e-6):\n    raise Odd()\n", "Odd (its message could not be read)"),
    "object": ("def l2norm(x, eps=1e-6):\n    return object()\n", "returned a value of type object, which the judge cannot read"),
}


def test_each_mistake_is_reported_in_one_line(judge, tmp_path):
    for name, (body, expected) in MISTAKES.items():
        before = body
        result = _grade_body(judge, tmp_path, "205", body, f"{name}.py")
        line = judge.summary_line(result)
        assert result["status"] in ("fail", "error"), name
        assert expected in line and "\n" not in line, (name, line)
        assert (tmp_path / f"{name}.py").read_text(encoding="utf-8") == before          # never changes the file


def test_endless_loop_hits_the_time_limit(judge, tmp_path, monkeypatch):
    monkeypatch.setenv("QWEN_JUDGE_TIMEOUT", "2")
    start = time.monotonic()
    result = _grade_body(judge, tmp_path, "205", "def l2norm(x, eps=1e-6):\n    while True:\n        pass\n")
    assert "did not finish within 2 s" in judge.summary_line(result) and time.monotonic() - start < 8


def test_printing_is_a_note_not_a_failure(judge, tmp_path, capsys):
    body = (SOLUTIONS / "s205.py").read_text(encoding="utf-8").replace(
        "    return x *", "    print('debugging', x.shape)\n    return x *")
    result = _grade_body(judge, tmp_path, "205", body)
    assert result["status"] == "pass" and result["printed"] == 8
    judge.print_report(judge.BY_ID["205"], result)
    out = capsys.readouterr().out
    assert "printed 8 line(s)" in out and "debugging" not in out


def test_failure_report_gives_numbers_once_and_one_line_per_failing_case(judge, capsys, tiny_path):
    code, out, _ = main(judge, capsys, "204", "--file", ROOT / "practice/_judge/wrong/204_no_one_plus.py",
                        "--model", tiny_path)
    assert code == 1
    for part in ("input: [2, 3, 16] float32, [16] bfloat16, 1e-06", "expected [2, 3, 16] float32, got [2, 3, 16] float32",
                 "max |difference|", "of values within tolerance (atol=1e-05, rtol=1e-05)",
                 "first mismatch at index [0, 0, 0]: expected", "→ looks like the `1 +` is missing"):
        assert part in out, part
    failing = [line for line in out.splitlines() if line.startswith("    ✗")]
    assert len(failing) >= 7 and all(": values differ" in line for line in failing)     # every failing case: its reason
    assert out.count("max |difference|") == 1 and out.count("`1 +` is missing") == 2   # summary + once below


def test_list_grade_hint_solution_reset_and_progress(judge, capsys, tiny_path, tmp_path):
    code, out, _ = main(judge, capsys, "--model", tiny_path)
    assert code == 0 and f"0/{len(judge.EXERCISES)} passed" in out and "not started" in out
    assert "Grade one: python practice/judge.py 201" in out                   # the next unsolved exercise
    code, out, _ = main(judge, capsys, "205", "--model", tiny_path)             # creates the starter, grades it
    mine = tmp_path / "work" / "205_l2norm.py"
    assert code == 1 and mine.is_file() and "not finished" in out
    code, _, err = main(judge, capsys, "205", "--solution")
    assert code == 2 and "after you pass it" in err
    mine.write_text("import torch\ndef l2norm(x, eps=1e-6):\n    return x / ((x * x).sum(-1, keepdim=True).sqrt() + eps)\n",
                    encoding="utf-8")
    code, out, _ = main(judge, capsys, "205", "--hint", "--model", tiny_path)
    assert code == 0 and "First failing case: l2norm: small vectors" in out and "It tests:" in out
    assert "eps was added to the length" in out and "Hint 1/3" in out
    code, out, _ = main(judge, capsys, "205", "--hint", "--lang", "zh", "--model", tiny_path)
    assert code == 0 and "提示 2/3" in out and "第一个未通过的用例" in out
    mine.write_text((SOLUTIONS / "s205.py").read_text(encoding="utf-8"), encoding="utf-8")
    code, out, _ = main(judge, capsys, "205", "--model", tiny_path, "--lang", "en")
    assert code == 0 and "passed all 8 cases" in out
    code, out, _ = main(judge, capsys, "205", "--solution")
    assert code == 0 and "rsqrt" in out
    code, out, _ = main(judge, capsys, "--json")
    listing = json.loads(out)
    row = next(e for e in listing["exercises"] if e["id"] == "205")
    assert listing["passed"] == 1 and row["passed"] and row["hints_seen"] == 2 and listing["next"] == "201"
    solved = mine.read_text(encoding="utf-8")
    code, out, _ = main(judge, capsys, "205", "--reset")
    backups = list((tmp_path / "work" / ".backup").glob("205_l2norm.*.py"))
    assert code == 0 and len(backups) == 1 and backups[0].read_text(encoding="utf-8") == solved
    assert "NotImplementedError" in mine.read_text(encoding="utf-8")
    code, out, _ = main(judge, capsys)
    row = next(line for line in out.splitlines() if " 205 " in line)
    assert "(edited)" not in row and "✓" in row and "starter restored, passed before" in row   # not "passed (edited)"
    progress = json.loads((tmp_path / "progress.json").read_text(encoding="utf-8"))
    assert progress["205"]["passed"] is True                                  # kept outside the code


def test_all_and_json(judge, capsys, tiny_path, tmp_path):
    """--all grades the exercises the learner started (their files exist), in order, and no other."""
    (tmp_path / "work").mkdir()
    for ex in (judge.BY_ID["221"], judge.BY_ID["204"]):
        (tmp_path / "work" / ex.filename).write_bytes(ex.starter.read_bytes())
    code, out, _ = main(judge, capsys, "--all", "--json", "--model", tiny_path)
    assert code == 1
    results = json.loads(out)
    assert [x["exercise"] for x in results] == ["204", "221"]
    assert all(x["status"] == "todo" for x in results)
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == ["204_rmsnorm.py", "221_causal_conv.py"]


@pytest.mark.parametrize("args, message", [
    (["299"], "there is no exercise 299"),
    (["204", "--file", "no_such_file.py"], "no such file"),
    (["204", "--hint", "--reset"], "one of --hint, --reset"),
    (["--hint"], "say which exercise"),
    (["--all", "204"], "--all grades every exercise"),
])
def test_usage_errors_exit_2(judge, capsys, args, message):
    code, _, err = main(judge, capsys, *args)
    assert code == 2 and message in err and "Traceback" not in err


def test_unknown_option_is_a_usage_error(judge, capsys, monkeypatch):
    assert main(judge, capsys, "--frobnicate")[0] == 2
    monkeypatch.setitem(sys.modules, "ipykernel", sys)            # a process that imported ipykernel (a notebook
    assert main(judge, capsys, "--frobnicate")[0] == 2            # test ran first): still a usage error
    from engine.cli import parser, setup                            # only a kernel's own -f file is let through
    for kernel in (["-f", "/tmp/kernel-1.json"], ["-f", "/tmp/k.json", "--HistoryManager.hist_file=:memory:"],
                   ["--f=/tmp/k.json"]):                          # as ipykernel, nbclient and VS Code start one
        assert setup(parser("x", "x"), kernel).lang in ("en", "zh", None)
    with pytest.raises(SystemExit):
        setup(parser("x", "x"), ["-f", "/tmp/k.json", "--tiny-typo"])


def test_watch_regrades_on_save_and_keeps_what_others_recorded(tiny_path, tmp_path):
    env = {**os.environ, "QWEN_PRACTICE_DIR": str(tmp_path / "work"), "QWEN_PROGRESS": str(tmp_path / "progress.json"),
           "PYTHONIOENCODING": "utf-8"}
    mine = tmp_path / "work" / "205_l2norm.py"
    proc = subprocess.Popen([sys.executable, "practice/judge.py", "205", "--watch", "--model", str(tiny_path)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, encoding="utf-8")
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    seen = []

    def wait_for(text, timeout=40):                  # never a blocking read: the test cannot hang
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                continue
            seen.append(line)
            if text in line:
                return
        raise AssertionError(f"never saw {text!r}: {''.join(seen)}")
    try:
        wait_for("polling every 0.5 s")
        wait_for("not finished")
        time.sleep(0.3)
        other = json.loads((tmp_path / "progress.json").read_text(encoding="utf-8"))
        other["204"] = {"status": "pass", "passed": True}                     # another command records 204 meanwhile
        (tmp_path / "progress.json").write_text(json.dumps(other), encoding="utf-8")
        mine.write_text((SOLUTIONS / "s205.py").read_text(encoding="utf-8"), encoding="utf-8")
        wait_for("passed all 8 cases")
        time.sleep(1.0)
        saved = json.loads((tmp_path / "progress.json").read_text(encoding="utf-8"))
        assert saved["205"]["passed"] and saved["204"]["passed"]              # re-read before saving
    finally:
        proc.terminate()
        proc.wait(10)


def test_chinese_report_uses_full_width_colons(judge, tmp_path):
    """The course's Chinese output has no ASCII colon next to a Chinese character; the judge's had
    ("g = -30：读之前旧状态就被忘掉了: 数值不同")."""
    import re
    from practice._judge.exercises import BY_ID
    from practice._judge.report import report_lines
    from qwen.lang import set_lang
    body = ("def delta_rule_step(S, k, v, g, beta):\n"
            "    read = (k[..., None, :] @ S).squeeze(-2)                 # read before the decay\n"
            "    S = S * g.exp()[..., None, None]\n"
            "    return S + k[..., :, None] * (beta[..., None] * (v - read))[..., None, :]\n"
            "def read_state(S, q):\n"
            "    return (q[..., None, :] @ S).squeeze(-2)\n")
    set_lang("zh")
    result = _grade_body(judge, tmp_path, "220", body)
    lines = report_lines(BY_ID["220"], result)
    assert result["status"] == "fail" and any("数值不同" in line for line in lines), lines
    cjk = r"[\u4e00-\u9fff]"
    assert not [line for line in lines if re.search(cjk + r"[,;:!?(]|[,;:!?)]" + cjk, line)], lines
    set_lang("en")
    result = _grade_body(judge, tmp_path, "220", body)
    assert any(": values differ" in line for line in report_lines(BY_ID["220"], result))


def test_naive_softplus_is_named_not_taken_for_bf16(judge, tmp_path):
    """log(1 + exp(x)) on upcast inputs loses the a = -15 case's g (about -6e-8); the bf16 diagnosis,
    whose atol (1e-7) matched any g that small, told this learner to upcast what was already fp32."""
    body = ("import torch\n"
            "def log_decay(a, A_log, dt_bias):\n"
            "    x = a.float() + dt_bias.float()\n"
            "    return -A_log.float().exp() * torch.log(1 + torch.exp(x))\n"
            "def write_strength(b):\n"
            "    return torch.sigmoid(b.float())\n")
    result = _grade_body(judge, tmp_path, "222", body)
    named = [c["diagnosis"]["name"] for c in result["cases"] if c.get("diagnosis")]
    assert result["status"] == "fail" and named == ["naive_softplus"], named
    assert "bf16" not in judge.summary_line(result) and "log1p" in judge.summary_line(result)


def test_decay_without_exp_is_named(judge, tmp_path):
    """S * g (the log decay) instead of S * exp(g) failed five cases with no mistake named."""
    body = ("def delta_rule_step(S, k, v, g, beta):\n"
            "    S = S * g[..., None, None]\n"
            "    read = (k[..., None, :] @ S).squeeze(-2)\n"
            "    return S + k[..., :, None] * (beta[..., None] * (v - read))[..., None, :]\n"
            "def read_state(S, q):\n"
            "    return (q[..., None, :] @ S).squeeze(-2)\n")
    result = _grade_body(judge, tmp_path, "220", body)
    named = {c["diagnosis"]["name"] for c in result["cases"] if c.get("diagnosis")}
    assert result["status"] == "fail" and named == {"decay_without_exp"}, named
    assert "the factor is exp(g)" in judge.summary_line(result)


def test_each_statement_states_the_tolerances_its_cases_use(judge, tiny_path, tmp_path):
    """A learner reads the tolerance in the statement; 222's a = -15 case was checked to atol 1e-9,
    rtol 1e-4 and the statement said only 1e-5. (208's bf16 case states its rule in words: 2% of
    the output's largest value.)"""
    import re
    from practice._judge.exercises import Context
    ctx = Context(tiny_path, tmp_path)
    for ex in judge.EXERCISES:
        statement = ex.starter.read_text(encoding="utf-8").split('"""')[1]
        stated = {float(n) for n in re.findall(r"\d+(?:\.\d+)?(?:e-?\d+)?", statement)}
        for case in ex.cases(ctx):
            if case.tol is None or (ex.id == "208" and case.tol.rtol == 0 and "2% of the output's largest" in statement):
                continue
            for x in (case.tol.atol, case.tol.rtol):
                assert not x or any(abs(x - n) <= 1e-3 * x for n in stated), (ex.id, case.name, x)


S250 = (SOLUTIONS / "s250.py").read_text(encoding="utf-8")


@pytest.mark.parametrize("change", ["drafts.append(0)", "drafts[0] = -1", "drafts.clear()", "drafts.reverse()"])
def test_250_a_drafts_list_changed_in_place_is_caught(judge, tmp_path, change):
    """The in-place check digests every argument, not only tensors: exercise 250's drafts are a list
    of ints, and a solution that returns the right answer after changing it was a pass."""
    body = S250.replace("    return count, int(choices[count])",
                        f"    answer = count, int(choices[count])\n    {change}\n    return answer")
    result = _grade_body(judge, tmp_path, "250", body)
    line = judge.summary_line(result)
    assert result["status"] == "fail" and "modified its input drafts (#1) in place" in line and "\n" not in line


def test_250_numpy_ints_are_refused_as_floats_are(judge, tmp_path):
    """(np.int64, np.int64) was read as two ints and passed, where (3.0, 5.0) and tensors fail."""
    for ret, said in (("import numpy as np\n    return np.int64(count), np.int64(choices[count])", "a numpy int64"),
                      ("return float(count), float(choices[count])", "returned a float, expected an int")):
        body = S250.replace("return count, int(choices[count])", ret)
        result = _grade_body(judge, tmp_path, "250", body)
        line = judge.summary_line(result)
        assert result["status"] == "fail" and said in line and "\n" not in line, line
    assert _grade_body(judge, tmp_path, "250", S250)["status"] == "pass"


def test_250_off_by_one_diagnosis_names_the_mistake_not_the_rule():
    """The old wording ("it counts the drafts kept, not the model's own next token") read as the rule."""
    from practice._judge.exercises import BY_ID
    en, zh = next(d.says for d in BY_ID["250"].diagnoses if d.name == "off_by_one")
    assert "next token was counted as an accepted draft" in en and "被算成了一个被接受的草稿" in zh
    assert "it counts the drafts kept" not in en


LEAN_REPORT = r"""
import sys, torch
from practice._judge.compare import Mismatch, check_tensor
from practice._judge.exercises.ch08_09 import _index
try:
    check_tensor(torch.zeros(2, 3), torch.tensor([[0.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))
except Mismatch as m:
    print(m.detail["first_index"], _index(torch.zeros(2, 3, 5), 4))
print(sorted(n for n in sys.modules if n.split(".")[0] == "sympy" or "symbolic_shapes" in n))
"""


def test_a_failing_case_does_not_import_torchs_symbolic_shape_machinery(run_script):
    """The first differing index came from torch.unravel_index, whose argument check imports torch.fx's
    symbolic shapes and sympy: about 1 s of CPU in every judge process at its first failing case
    (--verify, a learner's first wrong file). A process forked from one that imported only torch."""
    r = run_script("-c", LEAN_REPORT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == ["[1, 1] [1, 1]", "[]"], r.stdout
