"""practice/judge.py: the checks can pass and fail, and every kind of learner mistake is one clear line."""
import concurrent.futures
import json
import os

import pytest

from conftest import ROOT


@pytest.fixture
def judge_env(tmp_path, monkeypatch):
    """The learner's folder and progress file in a temp dir: tests never touch the real practice/."""
    env = {"QWEN_PRACTICE_DIR": str(tmp_path / "work"), "QWEN_PROGRESS": str(tmp_path / "progress.json")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


@pytest.fixture(scope="module")
def judge_module():
    import practice.judge as judge
    return judge


def run_judge(run_script, env, *args):
    return run_script("practice/judge.py", *args, env=env)


def test_verify_proves_the_checks(run_script, judge_env, tiny_path):
    r = run_judge(run_script, judge_env, "--verify", "--model", tiny_path)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith(("ok", "FAIL"))]
    assert len(lines) >= 6 * 2 + 12 and all(line.startswith("ok") for line in lines)
    assert "0 problem(s)" in r.stdout
    for wrong in ("no_one_plus", "no_fp32", "eps_outside", "sigmoid_gate", "mean_not_sum", "unbiased_var"):
        assert wrong in r.stdout


MISTAKES = {  # file body for exercise 205 (l2norm) -> what the one-line report must say
    "syntax": ("def l2norm(x, eps=1e-6)\n    return x\n", "syntax error on line 1"),
    "import": ("import numpy_that_does_not_exist\n", "import failed"),
    "missing": ("def l2_norm(x, eps=1e-6):\n    return x\n", "no function named l2norm"),
    "return_type": ("def l2norm(x, eps=1e-6):\n    return x.tolist()\n", "returned list, expected a tensor"),
    "nan": ("def l2norm(x, eps=1e-6):\n    return x / (x - x).sum(-1, keepdim=True)\n", "NaN or inf in your output"),
    "in_place": ("import torch\ndef l2norm(x, eps=1e-6):\n    return x.mul_(torch.rsqrt((x * x).sum(-1, keepdim=True) + eps))\n",
                 "modified its input #1 in place"),
    "exit_at_import": ("import sys\nsys.exit(0)\n", "calls sys.exit()"),
    "exit_in_function": ("import sys\ndef l2norm(x, eps=1e-6):\n    sys.exit(3)\n", "called sys.exit()"),
    "exception": ("def l2norm(x, eps=1e-6):\n    y = x * 2\n    return y / undefined_name\n",
                  "NameError: name 'undefined_name' is not defined (line 3 of your file)"),
    "endless_loop": ("def l2norm(x, eps=1e-6):\n    while True:\n        pass\n", "did not finish within"),
    "huge_allocation": ("import torch\ndef l2norm(x, eps=1e-6):\n    return torch.empty(10**11)\n",
                        "more memory than the"),
    "killed": ("import os\nos.kill(os.getpid(), 9)\n", "killed by signal 9"),
}


def test_each_mistake_is_reported_in_one_line(judge_module, tmp_path, tiny_path, monkeypatch):
    monkeypatch.setattr(judge_module, "TIME_LIMIT", 10)
    ex = judge_module.BY_ID["205"]
    files = {}
    for name, (body, _) in MISTAKES.items():
        files[name] = tmp_path / f"{name}.py"
        files[name].write_text(body, encoding="utf-8")
    before = {n: f.read_bytes() for n, f in files.items()}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = dict(zip(files, pool.map(lambda n: judge_module.grade(ex, files[n], tiny_path), files)))
    for name, (_, expected) in MISTAKES.items():
        line = judge_module.summary_line(results[name])
        assert results[name]["status"] in ("fail", "error"), name
        assert expected in line and "\n" not in line, (name, line)
    assert {n: f.read_bytes() for n, f in files.items()} == before            # never changes the file


def test_printing_is_a_note_not_a_failure(judge_module, tmp_path, tiny_path, capsys):
    ex = judge_module.BY_ID["205"]
    f = tmp_path / "printing.py"
    f.write_text((ROOT / "practice/_judge/solutions/s205.py").read_text(encoding="utf-8").replace(
        "    return x *", "    print('debugging', x.shape)\n    return x *"), encoding="utf-8")
    result = judge_module.grade(ex, f, tiny_path)
    assert result["status"] == "pass" and result["printed"] == 8
    judge_module.print_report(ex, result)
    assert "printed 8 line(s)" in capsys.readouterr().out


def test_failure_report_gives_shapes_dtypes_differences_and_tolerance(run_script, judge_env, tiny_path):
    r = run_judge(run_script, judge_env, "204", "--file", ROOT / "practice/_judge/wrong/204_no_one_plus.py",
                  "--model", tiny_path)
    assert r.returncode == 1
    out = r.stdout
    for part in ("input: [2, 3, 16] float32, [16] bfloat16, float", "expected [2, 3, 16] float32, got [2, 3, 16] float32",
                 "max |difference|", "max relative", "of values within tolerance (atol=1e-05, rtol=1e-05)",
                 "first mismatch at index [0, 0, 0]: expected"):
        assert part in out, part


def test_list_grade_hint_solution_reset_and_progress(run_script, judge_env, tiny_path, tmp_path):
    r = run_judge(run_script, judge_env, "--model", tiny_path)
    assert r.returncode == 0 and "0/6 passed" in r.stdout and "not started" in r.stdout
    r = run_judge(run_script, judge_env, "205", "--model", tiny_path)          # creates the starter, grades it
    mine = tmp_path / "work" / "205_l2norm.py"
    assert r.returncode == 1 and mine.is_file() and "not finished" in r.stdout
    r = run_judge(run_script, judge_env, "205", "--solution")
    assert r.returncode == 2 and "after you pass it" in r.stderr
    for level in (1, 2):
        r = run_judge(run_script, judge_env, "205", "--hint", "--lang", "zh")
        assert r.returncode == 0 and f"提示 {level}/3" in r.stdout
    mine.write_text((ROOT / "practice/_judge/solutions/s205.py").read_text(encoding="utf-8"), encoding="utf-8")
    r = run_judge(run_script, judge_env, "205", "--model", tiny_path)
    assert r.returncode == 0 and "passed all 8 cases" in r.stdout
    r = run_judge(run_script, judge_env, "205", "--solution")
    assert r.returncode == 0 and "rsqrt" in r.stdout
    r = run_judge(run_script, judge_env, "--json")
    listing = json.loads(r.stdout)
    row = next(e for e in listing["exercises"] if e["id"] == "205")
    assert listing["passed"] == 1 and row["passed"] and row["hints_seen"] == 2
    solved = mine.read_text(encoding="utf-8")
    r = run_judge(run_script, judge_env, "205", "--reset")
    backups = list((tmp_path / "work" / ".backup").glob("205_l2norm.*.py"))
    assert r.returncode == 0 and len(backups) == 1 and backups[0].read_text(encoding="utf-8") == solved
    assert "NotImplementedError" in mine.read_text(encoding="utf-8")
    progress = json.loads((tmp_path / "progress.json").read_text(encoding="utf-8"))
    assert progress["205"]["passed"] is True                                  # kept outside the code


def test_all_and_json(run_script, judge_env, tiny_path):
    r = run_judge(run_script, judge_env, "--all", "--json", "--model", tiny_path)
    assert r.returncode == 1
    results = json.loads(r.stdout[r.stdout.index("["):])
    assert [x["exercise"] for x in results] == ["201", "202", "203", "204", "205", "206"]
    assert all(x["status"] == "todo" for x in results)


@pytest.mark.parametrize("args, message", [
    (["299"], "there is no exercise 299"),
    (["204", "--file", "no_such_file.py"], "no such file"),
    (["204", "--hint", "--reset"], "one of --hint, --reset"),
    (["--hint"], "say which exercise"),
    (["--all", "204"], "--all grades every exercise"),
])
def test_usage_errors_exit_2(run_script, judge_env, args, message):
    r = run_judge(run_script, judge_env, *args)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr


def test_unknown_option_is_a_usage_error(run_script, judge_env):
    assert run_judge(run_script, judge_env, "--frobnicate").returncode == 2


def test_watch_regrades_on_save_and_says_it_polls(judge_env, tiny_path, tmp_path):
    import subprocess
    import sys
    import time
    mine = tmp_path / "work" / "205_l2norm.py"
    proc = subprocess.Popen([sys.executable, "practice/judge.py", "205", "--watch", "--model", str(tiny_path)],
                            cwd=ROOT, env={**os.environ, **judge_env}, stdout=subprocess.PIPE, text=True)
    seen = []

    def wait_for(text, timeout=60):
        end = time.time() + timeout
        while time.time() < end:
            line = proc.stdout.readline()
            seen.append(line)
            if text in line:
                return
        raise AssertionError(f"never saw {text!r}: {''.join(seen)}")
    try:
        wait_for("polling every 0.5 s")
        wait_for("not finished")
        time.sleep(0.1)
        mine.write_text((ROOT / "practice/_judge/solutions/s205.py").read_text(encoding="utf-8"), encoding="utf-8")
        wait_for("passed all 8 cases")
    finally:
        proc.terminate()
        proc.wait(10)
