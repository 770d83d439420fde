"""The local judge: grades the practice exercises on the model's own tensors, offline.

    python practice/judge.py              list the exercises, their status and your progress
    python practice/judge.py 204          grade exercise 204 (creates practice/204_rmsnorm.py first)
    python practice/judge.py --all        grade every exercise
    python practice/judge.py 204 --file my_try.py    grade that file instead
    python practice/judge.py 204 --watch  regrade every time the file is saved
    python practice/judge.py 204 --hint   the next hint;  --solution  the reference (after passing)
    python practice/judge.py 204 --reset  restore the starter (your version is backed up)
    python practice/judge.py --verify     prove the checks: references pass, starters and known
                                          wrong solutions fail
    --json for tools, --lang en|zh, --tiny / --model PATH for the tensors to grade on.

Your code runs in its own process with a time and a memory limit; the judge never changes your
file (except --reset, which keeps a backup). Exit code: 0 all graded passed, 1 a failure, 2 a
usage error. Progress is kept outside the code ($QWEN_PROGRESS, default
~/.local/share/transformer-by-hand/progress.json), so it survives upgrades.
"""
import concurrent.futures
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from practice._judge.exercises import BY_ID, EXERCISES  # noqa: E402
from qwen.cli import pad, parser, report, setup  # noqa: E402
from qwen.lang import QwenError, T, get_lang, set_lang  # noqa: E402

JUDGE = HERE / "_judge"
WORK = Path(os.environ.get("QWEN_PRACTICE_DIR") or HERE)        # where the learner's files live
TIME_LIMIT = float(os.environ.get("QWEN_JUDGE_TIMEOUT", 20))   # seconds per exercise


class UsageError(Exception):
    """Wrong arguments: exit code 2."""


# ------------------------------------------------------------------------------------------ files

def learner_file(ex):
    """practice/2xx_name.py, created from the starter the first time it is needed."""
    path = WORK / ex.filename
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(JUDGE / "starters" / ex.filename, path)
        print(T("Created {f} from the starter: open it and fill in the functions.",
                "已根据起始文件创建 {f}：打开它，把函数写完。", f=shown(path)))
    return path


def shown(path):
    """A path as the learner would type it: relative to the repository when inside it."""
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)



def progress_file():
    base = os.environ.get("QWEN_PROGRESS")
    if base:
        return Path(base)
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data) / "transformer-by-hand" / "progress.json"


def load_progress():
    try:
        return json.loads(progress_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def save_progress(progress):
    file = progress_file()
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_suffix(".tmp")
    tmp.write_text(json.dumps(progress, indent=1, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, file)


def digest(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


# ------------------------------------------------------------------------------------------ grading

def model_for_checks(args):
    """The tensors to grade on: --tiny, --model, else the real model if on disk (no download), else tiny."""
    from qwen.tiny import tiny_model_path
    from qwen.weights import ModelNotFound, find_model
    if args.tiny:
        return tiny_model_path()
    if args.model:
        return find_model(args.model)
    try:
        return find_model(download=False)
    except ModelNotFound:
        return tiny_model_path()


def memory_limit(model):
    """3 GB plus the size of the weights (they are mapped into the process)."""
    weights = sum(p.stat().st_size for p in Path(model).glob("*.safetensors"))
    return 3 * 2**30 + weights


_forkserver = None


def _processes():
    """A fork server with torch already imported: each grading forks from it in milliseconds
    instead of paying `import torch` again. None where fork servers do not exist (Windows)."""
    global _forkserver
    if _forkserver is None:
        import multiprocessing
        if "forkserver" in multiprocessing.get_all_start_methods():
            _forkserver = multiprocessing.get_context("forkserver")
            _forkserver.set_forkserver_preload(["torch", "practice._judge.runner", "practice._judge.exercises",
                                                "practice._judge.compare", "qwen.norm", "qwen.weights"])
        else:
            _forkserver = False
    return _forkserver or None


def grade(ex, file, model):
    """Grade one file in a separate process with a time limit; return the runner's result dict."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        job = (ex.id, str(file), str(out), get_lang(), str(model), str(memory_limit(model)))
        ctx = _processes()
        if ctx:
            from practice._judge import runner
            proc = ctx.Process(target=runner.main, args=job, daemon=True)
            proc.start()
            proc.join(TIME_LIMIT)
            timed_out = proc.is_alive()
            if timed_out:
                proc.kill()
                proc.join()
            code, last = proc.exitcode, ""
        else:
            cmd = [sys.executable, str(JUDGE / "runner.py"), *job]
            try:
                p = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=TIME_LIMIT,
                                   env={**os.environ, "OMP_NUM_THREADS": "1"})
                timed_out, code, last = False, p.returncode, (p.stderr.strip().splitlines() or [""])[-1]
            except subprocess.TimeoutExpired:
                timed_out, code, last = True, None, ""
        try:                                                     # written even if a stray thread hung on
            return json.loads(out.read_text(encoding="utf-8"))
        except (OSError, ValueError):                            # not written, or cut short
            pass
        if timed_out:
            return _error(ex, file, "timeout", T("did not finish within {s:.0f} s (an endless loop?)",
                                                  "{s:.0f} 秒内没有结束（死循环？）", s=TIME_LIMIT))
        if code is not None and code < 0:
            return _error(ex, file, "killed", T("your code was killed by signal {n} (out of memory?)",
                                                 "你的代码被信号 {n} 终止（内存不够？）", n=-code))
        return _error(ex, file, "crash", T("the grader stopped (exit code {c}) {m}", "评测器中途停止（退出码 {c}）{m}",
                                           c=code, m=last))


def _error(ex, file, kind, message):
    return {"exercise": ex.id, "file": str(file), "status": "error", "cases": [],
            "error": {"kind": kind, "message": message}, "printed": 0}


def summary_line(result):
    """One line: the verdict, or the first problem."""
    if result["status"] == "pass":
        return T("passed all {n} cases", "全部 {n} 个用例通过", n=len(result["cases"]))
    if result["error"]:
        return result["error"]["message"]
    bad = [c for c in result["cases"] if not c["ok"]]
    todo = sum(c["todo"] for c in bad)
    if todo == len(bad):
        return T("not finished: {n} case(s) still raise NotImplementedError", "还没完成：{n} 个用例仍然抛出 NotImplementedError",
                 n=todo)
    first = next(c for c in bad if not c["todo"])
    return f"{first['function']}: {first['name']}: {first['message']}"


def print_report(ex, result, verbose=True):
    mark = {"pass": "✓", "fail": "✗", "todo": "·", "error": "✗"}[result["status"]]
    print(f"{mark} {ex.id} {T(*ex.title)}: {summary_line(result)}")
    if not verbose or result["error"]:
        return
    shown = set()
    for c in result["cases"]:
        tick = "✓" if c["ok"] else ("·" if c["todo"] else "✗")
        print(f"    {tick} {c['function']}: {c['name']}")
        if c["ok"] or c["todo"] or c["function"] in shown:
            continue
        shown.add(c["function"])                                 # full detail for the first failure of each
        d = c["detail"]
        print(f"        {c['message']}")
        print(T("        input: {i}", "        输入：{i}", i=", ".join(d.get("inputs", []))))
        if "expected" in d:
            print(T("        expected {e}, got {g}", "        期望 {e}，得到 {g}", e=d["expected"], g=d["got"]))
        if "max_abs" in d:
            print(T("        max |difference| {a:.3g}, max relative {r:.3g}; {w:.1%} of values within tolerance ({t})",
                    "        最大绝对差 {a:.3g}，最大相对差 {r:.3g}；{w:.1%} 的数值在容差内（{t}）",
                    a=d["max_abs"], r=d["max_rel"], w=d["within"], t=d["tolerance"]))
        if d.get("first_index") is not None and "expected_value" in d:
            print(T("        first mismatch at index {i}: expected {e}, got {g}",
                    "        第一个不一致的位置 {i}：期望 {e}，得到 {g}", i=d["first_index"], e=d["expected_value"],
                    g=d["got_value"]))
    if result.get("printed"):
        print(T("    note: your code printed {n} line(s); the judge ignores them",
                "    提示：你的代码打印了 {n} 行；评测器会忽略它们", n=result["printed"]))


def record(progress, ex, result, file):
    entry = progress.setdefault(ex.id, {})
    entry["status"] = result["status"]
    entry["graded_at"] = time.strftime("%Y-%m-%d %H:%M:%S")
    entry["file_digest"] = digest(file)
    if result["status"] == "pass":
        entry["passed"] = True


# ------------------------------------------------------------------------------------------ commands

def cmd_list(progress, as_json):
    rows = []
    for ex in EXERCISES:
        entry = progress.get(ex.id, {})
        path = WORK / ex.filename
        status = entry.get("status", "new")
        if entry.get("file_digest") and path.exists() and digest(path) != entry["file_digest"]:
            status += "*"                                        # edited since it was last graded
        rows.append({"id": ex.id, "title": T(*ex.title), "difficulty": ex.difficulty, "needs_torch": ex.needs_torch,
                     "status": status, "passed": bool(entry.get("passed")), "file": shown(path),
                     "hints_seen": entry.get("hints", 0)})
    done = sum(r["passed"] for r in rows)
    if as_json:
        print(json.dumps({"exercises": rows, "passed": done, "total": len(rows)}, ensure_ascii=False, indent=1))
        return 0
    width = 24
    bar = "█" * round(width * done / len(rows)) + "░" * (width - round(width * done / len(rows)))
    print(T("Practice: chapters 1 to 3   [{bar}] {d}/{n} passed", "练习：第 1 到 3 章   [{bar}] 已通过 {d}/{n}",
            bar=bar, d=done, n=len(rows)))
    names = {"new": T("not started", "未开始"), "todo": T("in progress", "进行中"), "fail": T("failing", "未通过"),
             "error": T("error", "出错"), "pass": T("passed", "已通过")}
    for r in rows:
        star = r["status"].endswith("*")
        label = names[r["status"].rstrip("*")] + (T(" (edited)", "（已修改）") if star else "")
        torch_mark = "PyTorch" if r["needs_torch"] else "       "
        level = T("easy", "简单") if r["difficulty"] == "easy" else T("medium", "中等")
        print(f"  {'✓' if r['passed'] else ' '} {r['id']}  {pad(r['title'], 52)} {pad(level, 7)} {torch_mark}  {label}")
    print(T("Grade one: python practice/judge.py 204   (your file: practice/204_rmsnorm.py)",
            "评测一个：python practice/judge.py 204   （你的文件：practice/204_rmsnorm.py）"))
    return 0


def cmd_grade(exercises, args, progress):
    model = model_for_checks(args)
    files = {ex.id: Path(args.file).resolve() if args.file else learner_file(ex) for ex in exercises}
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:    # two processes at a time
        results = list(pool.map(lambda ex: grade(ex, files[ex.id], model), exercises))
    for ex, result in zip(exercises, results):
        if not args.file:
            record(progress, ex, result, files[ex.id])
    if not args.file:
        save_progress(progress)
    if args.json:
        print(json.dumps(results, ensure_ascii=False, indent=1))
    else:
        for ex, result in zip(exercises, results):
            print_report(ex, result, verbose=len(exercises) == 1 or result["status"] != "pass")
        if "tiny" in str(model):
            print(T("(graded on the built-in tiny checkpoint; with the real model on disk the same checks use its tensors)",
                    "（用内置小检查点评测；磁盘上有真实模型时，同样的检查会使用它的张量）"))
    return 0 if all(r["status"] == "pass" for r in results) else 1


def cmd_watch(ex, args, progress):
    path = Path(args.file).resolve() if args.file else learner_file(ex)
    print(T("Watching {f} by polling every 0.5 s (Ctrl-C to stop).", "每 0.5 秒检查一次 {f} 是否改动（Ctrl-C 停止）。",
            f=path), flush=True)
    seen = None
    try:
        while True:
            stamp = path.stat().st_mtime_ns if path.exists() else None
            if stamp != seen:
                seen = stamp
                print("\n" + time.strftime("%H:%M:%S"))
                cmd_grade([ex], args, progress)
                sys.stdout.flush()
            time.sleep(0.5)
    except KeyboardInterrupt:
        return 0


def cmd_hint(ex, progress):
    entry = progress.setdefault(ex.id, {})
    level = min(entry.get("hints", 0) + 1, len(ex.hints))
    entry["hints"] = level
    save_progress(progress)
    for i in range(level):
        print(T("Hint {i}/{n}: {h}", "提示 {i}/{n}：{h}", i=i + 1, n=len(ex.hints), h=T(*ex.hints[i])))
    if level == len(ex.hints):
        print(T("(that was the last hint)", "（这是最后一条提示）"))
    return 0


def cmd_solution(ex, progress):
    if not progress.get(ex.id, {}).get("passed"):
        raise UsageError(T("The reference solution of {id} is shown after you pass it: python practice/judge.py {id}"
                           " (try --hint).", "{id} 的参考答案要在你通过之后才能看：python practice/judge.py {id}（可以试试 --hint）。",
                           id=ex.id))
    print((JUDGE / "solutions" / f"s{ex.id}.py").read_text(encoding="utf-8"))
    return 0


def cmd_reset(ex):
    path = WORK / ex.filename
    if path.exists():
        backup = WORK / ".backup" / f"{path.stem}.{time.strftime('%Y%m%d-%H%M%S')}.py"
        n = 1
        while backup.exists():                                   # two resets in one second
            backup, n = backup.with_name(f"{path.stem}.{time.strftime('%Y%m%d-%H%M%S')}-{n}.py"), n + 1
        backup.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, backup)
        print(T("Your version is saved as {b}.", "你的版本已备份为 {b}。", b=shown(backup)))
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(JUDGE / "starters" / ex.filename, path)
    print(T("{f} is the starter again.", "{f} 已恢复成起始文件。", f=shown(path)))
    return 0


def cmd_verify(args):
    """Every reference passes; every starter fails; every known-wrong solution fails as expected."""
    set_lang("en")                                               # the expected messages are the English ones
    model = model_for_checks(args)
    jobs = []
    for ex in EXERCISES:
        jobs.append((ex, JUDGE / "solutions" / f"s{ex.id}.py", "pass", None))
        jobs.append((ex, JUDGE / "starters" / ex.filename, "todo", None))
        jobs += [(ex, JUDGE / "wrong" / name, "fail", expect) for name, expect in ex.wrong]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda job: grade(job[0], job[1], model), jobs))
    problems = 0
    for (ex, file, want, expect), result in zip(jobs, results):
        line = summary_line(result)
        ok = (result["status"] == "pass") if want == "pass" else (result["status"] != "pass")
        ok = ok and (want != "todo" or result["status"] == "todo")
        ok = ok and (expect is None or expect in line)
        problems += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {ex.id} {file.parent.name}/{file.name:<26} {result['status']:<5} {line}")
    print(T("verify: {n} checks, {p} problem(s)", "verify：{n} 项检查，{p} 个问题", n=len(jobs), p=problems))
    return 0 if problems == 0 else 1


def main(argv=None):
    p = parser("The practice judge: grade the exercises offline, on the model's tensors.",
               "练习评测器：离线评测练习，使用模型的张量。")
    p.add_argument("exercise", nargs="?", help=T("exercise number, e.g. 204", "练习编号，例如 204"))
    p.add_argument("--all", action="store_true", help=T("grade every exercise", "评测所有练习"))
    p.add_argument("--file", help=T("grade this file instead of practice/2xx_*.py", "评测这个文件，而不是 practice/2xx_*.py"))
    p.add_argument("--watch", action="store_true", help=T("regrade on every save", "每次保存后重新评测"))
    p.add_argument("--hint", action="store_true", help=T("show the next hint", "显示下一条提示"))
    p.add_argument("--solution", action="store_true", help=T("show the reference solution (after passing)",
                                                             "显示参考答案（通过之后）"))
    p.add_argument("--reset", action="store_true", help=T("restore the starter (keeps a backup)", "恢复起始文件（会备份）"))
    p.add_argument("--verify", action="store_true", help=T("prove that the checks can pass and fail",
                                                           "证明检查既能通过也能失败"))
    p.add_argument("--json", action="store_true", help=T("machine-readable output", "机器可读的输出"))
    try:
        args = setup(p, argv)
    except SystemExit as e:                                      # argparse: usage errors exit 2
        return e.code
    try:
        return run(args)
    except UsageError as e:
        print(T("judge: ", "评测器：") + str(e), file=sys.stderr)
        return 2
    except QwenError as e:
        if args.debug:
            raise
        report(e)
        return 1


def run(args):
    if args.verify:
        return cmd_verify(args)
    progress = load_progress()
    actions = [a for a in ("all", "watch", "hint", "solution", "reset") if getattr(args, a)]
    if len(actions) > 1:
        raise UsageError(T("use one of --{a} at a time", "一次只能用 --{a} 中的一个", a=", --".join(actions)))
    if args.exercise is None and not args.all:
        if actions or args.file:
            raise UsageError(T("say which exercise, e.g. python practice/judge.py 204 --{a}",
                               "请指明练习编号，例如 python practice/judge.py 204 --{a}", a=(actions or ["file"])[0]))
        return cmd_list(progress, args.json)
    if args.all:
        if args.exercise or args.file:
            raise UsageError(T("--all grades every exercise: leave out the number and --file",
                               "--all 会评测所有练习：不要再给编号或 --file"))
        return cmd_grade(EXERCISES, args, progress)
    ex = BY_ID.get(args.exercise)
    if ex is None:
        raise UsageError(T("there is no exercise {e}; the exercises are {ids}", "没有练习 {e}；现有的练习是 {ids}",
                           e=args.exercise, ids=", ".join(BY_ID)))
    if args.file and not Path(args.file).is_file():
        raise UsageError(T("--file {f}: no such file", "--file {f}：文件不存在", f=args.file))
    if args.hint:
        return cmd_hint(ex, progress)
    if args.solution:
        return cmd_solution(ex, progress)
    if args.reset:
        return cmd_reset(ex)
    if args.watch:
        return cmd_watch(ex, args, progress)
    return cmd_grade([ex], args, progress)


if __name__ == "__main__":
    sys.exit(main())
