"""The local judge: grades the practice exercises on the model's own tensors, offline.

    python practice/judge.py              list the exercises, their status and your progress
    python practice/judge.py 204          grade exercise 204 (creates practice/204_rmsnorm.py first)
    python practice/judge.py --all        grade every exercise you have started
    python practice/judge.py 204 --file my_try.py    grade that file instead
    python practice/judge.py 204 --watch  regrade every time the file is saved
    python practice/judge.py 204 --hint   your first failing case, then the next hint
    python practice/judge.py 204 --solution   the reference (after passing)
    python practice/judge.py 204 --reset  restore the starter (your version is backed up)
    python practice/judge.py --verify     prove the checks: references and equivalent forms pass,
                                          starters are unfinished, each known mistake is named
    python practice/judge.py --verify 240,241   the same for some exercises only
    python practice/judge.py --web        the same in the browser: a local page that edits, grades and
                                          tracks the exercises (--no-browser: only print its address)
    --json for tools, --lang en|zh, --tiny / --model PATH for the tensors to grade on.
    In a notebook: from practice import check; check(204, rms_norm, gated_rms_norm)

Your functions run in a sandbox (a fresh Python process, practice/_judge/sandbox.py) with a time and
a memory limit, and send back plain data; the judge computes the expected values itself and compares. It never changes your file
(except --reset, which keeps a backup). Exit code: 0 all graded passed, 1 a failure, 2 a usage
error, 130 stopped with Ctrl-C. Progress is kept outside the code ($QWEN_PROGRESS, default
~/.local/share/transformer-by-hand/progress.json), so it survives upgrades.
Limits: $QWEN_JUDGE_TIMEOUT seconds per exercise (default 20), $QWEN_JUDGE_MEMORY GB (default 3).
"""
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from qwen.lang import detect_lang  # noqa: E402  (before the handler: an import inside it fails mid-import)


def _stopped_while_starting(signum, frame):
    """Ctrl-C while torch is being imported (the first seconds): one line, not an import traceback.
    Installed before any other import, and imports nothing itself: a Ctrl-C in the middle of an import
    would make `from qwen.lang import ...` here fail, and the judge would end (130) without its line."""
    try:
        args = " ".join(sys.argv[1:]) + " "
        zh = "--lang zh " in args or "--lang=zh " in args or ("--lang" not in args and detect_lang() == "zh")
        os.write(2, ("\n已停止。\n" if zh else "\nStopped.\n").encode("utf-8"))
    finally:
        os._exit(130)


if __name__ == "__main__":
    import signal
    signal.signal(signal.SIGINT, _stopped_while_starting)      # main() restores KeyboardInterrupt

import hashlib  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
from practice._judge import grading, jsontext, progress  # noqa: E402
from practice._judge.files import read_regular, write_atomic  # noqa: E402
from practice._judge.report import case_line, first_failing, report_lines, summary_line  # noqa: E402
from practice._judge.exercises import BY_ID, EXERCISES, JUDGE, text  # noqa: E402
from engine.cli import pad, parser, report, setup  # noqa: E402
from qwen.lang import QwenError, T, set_lang  # noqa: E402

WORK = Path(os.environ.get("QWEN_PRACTICE_DIR") or HERE)        # where the learner's files live


class UsageError(Exception):
    """Wrong arguments or settings: exit code 2."""


def _limit(var, default, low, high, unit_en, unit_zh):
    raw = os.environ.get(var)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or not low <= value <= high:
        raise UsageError(T("{v}={r!r} is not a number of {u} between {a:g} and {b:g}: fix or unset it",
                           "{v}={r!r} 不是 {a:g} 到 {b:g} 之间的{u}数：请改正或删除它",
                           v=var, r=raw, u=T(unit_en, unit_zh), a=low, b=high))
    return value


def time_limit():
    return _limit("QWEN_JUDGE_TIMEOUT", 20.0, 1, 3600, "seconds", "秒")


def memory_limit():
    return int(_limit("QWEN_JUDGE_MEMORY", grading.MEMORY / 2**30, 0.05, 1024, "GB", " GB ") * 2**30)


# ------------------------------------------------------------------------------------------ files

def learner_file(ex, quiet=False, create=True):
    """practice/2xx_name.py, created from the starter the first time it is needed."""
    path = WORK / ex.filename
    if create and not os.path.lexists(path):                    # a link, even a dangling one, is never written through
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "xb") as f:                          # never over something that appeared meanwhile
                f.write(ex.starter.read_bytes())
        except OSError as e:
            raise UsageError(T("cannot create {f} ({e}): check QWEN_PRACTICE_DIR, or grade a file with --file",
                               "无法创建 {f}（{e}）：请检查 QWEN_PRACTICE_DIR，或用 --file 评测一个文件",
                               f=shown(path), e=e.strerror or e)) from None
        if not quiet:
            print(T("Created {f} from the starter: open it and fill in the functions.",
                    "已根据起始文件创建 {f}：打开它，把函数写完。", f=shown(path)))
    return path


def shown(path):
    """A path as the learner would type it: relative to the repository when inside it."""
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def digest(path):
    try:
        return hashlib.sha256(read_regular(path)).hexdigest()[:16]
    except OSError:
        return ""


# ------------------------------------------------------------------------------------------ grading

def model_for_checks(args):
    """The tensors to grade on: --tiny, --model / $QWEN_MODEL (asked for: no fallback), else the real
    model if on disk (no download), else tiny. A broken model is one line about the model."""
    from engine.tiny import tiny_model_path
    from engine.hub import ModelNotFound, find_model
    if args.tiny:
        return tiny_model_path()
    try:
        if args.model or os.environ.get("QWEN_MODEL"):
            return find_model(args.model, download=False)
        try:
            return find_model(download=False)
        except ModelNotFound:
            return tiny_model_path()
    except QwenError as e:
        raise grading.ModelProblem(T("the model to grade on: {e}", "用来评测的模型：{e}", e=e)) from e


def grade(ex, file, model, **kw):
    return grading.grade(ex, model, file=file, time_limit=time_limit(), memory=memory_limit(), **kw)


def print_report(ex, result, verbose=True):
    for line in report_lines(ex, result, verbose):
        print(line)


def record(ex, result, file, graded=None):
    """The progress change of one grading. `graded`: the file's digest when the grading started, so a file
    saved while it ran (the page's Ctrl-S, another editor) shows as edited since, not as the graded one."""
    stamp, fdigest = time.strftime("%Y-%m-%d %H:%M:%S"), digest(file) if graded is None else graded

    def change(p):
        entry = p.setdefault(ex.id, {})
        entry.update(status=result["status"], graded_at=stamp, file_digest=fdigest)
        if result["status"] == "pass":
            entry["passed"] = True
    return change


# ------------------------------------------------------------------------------------------ commands

def next_unsolved(state):
    return next((ex for ex in EXERCISES if not state.get(ex.id, {}).get("passed")), None)


def list_rows(state):
    """One row per exercise, as the list shows it (the terminal's and the web page's)."""
    rows = []
    for ex in EXERCISES:
        entry = state.get(ex.id, {})
        path = WORK / ex.filename
        status = entry.get("status", "new")
        if entry.get("file_digest") and path.exists() and digest(path) != entry["file_digest"]:
            status += "*"                                        # edited since it was last graded
        rows.append({"id": ex.id, "title": text(ex.title), "difficulty": ex.difficulty, "needs_torch": ex.needs_torch,
                     "status": status, "passed": bool(entry.get("passed")), "file": shown(path),
                     "hints_seen": entry.get("hints", 0)})
    return rows


def status_label(r, state):
    """A row's status in words: "failing (edited), passed before"."""
    names = {"new": T("not started", "未开始"), "todo": T("in progress", "进行中"), "fail": T("failing", "未通过"),
             "error": T("error", "出错"), "pass": T("passed", "已通过")}
    star = r["status"].endswith("*")
    base = r["status"].rstrip("*")
    restored = base == "new" and bool(state.get(r["id"], {}).get("file_digest"))    # --reset wrote the starter
    label = (T("starter restored", "已恢复为起始文件") if restored else names.get(base, r["status"])) + \
        (T(" (edited)", "（已修改）") if star else "")
    if r["passed"] and not r["status"].startswith("pass"):
        label += T(", passed before", "，曾经通过")
    return label


def cmd_list(as_json):
    state = progress.load()
    rows = list_rows(state)
    done = sum(r["passed"] for r in rows)
    nxt = next_unsolved(state)
    if as_json:
        print(jsontext.dumps({"exercises": rows, "passed": done, "total": len(rows), "next": nxt.id if nxt else None},
                         ensure_ascii=False, indent=1))
        return 0
    width = 24
    filled = round(width * done / len(rows))
    print(T("Practice   [{bar}] {d}/{n} passed", "练习   [{bar}] 已通过 {d}/{n}", bar="█" * filled + "░" * (width - filled),
            d=done, n=len(rows)))
    levels = {"easy": T("easy", "简单"), "medium": T("medium", "中等"), "hard": T("hard", "困难")}
    for r in rows:
        torch_mark = "PyTorch" if r["needs_torch"] else "       "
        print(f"  {'✓' if r['passed'] else ' '} {r['id']}  {pad(r['title'], 52)} {pad(levels.get(r['difficulty'], r['difficulty']), 7)}"
              f" {torch_mark}  {status_label(r, state)}")
    if nxt:
        print(T("Grade one: python practice/judge.py {id}   (your file: {f})",
                "评测一个：python practice/judge.py {id}   （你的文件：{f}）", id=nxt.id, f=shown(WORK / nxt.filename)))
    else:
        print(T("All passed. Regrade any: python practice/judge.py --all", "全部通过。可以重新评测：python practice/judge.py --all"))
    return 0


def cmd_grade(exercises, args, create=True):
    model = model_for_checks(args)
    results = []
    for ex in exercises:
        file = Path(args.file).resolve() if args.file else learner_file(ex, quiet=args.json, create=create)
        graded = digest(file)
        result = grade(ex, file, model)
        results.append(result)
        if not args.json:                                        # the report first, then the progress
            print_report(ex, result, verbose=len(exercises) == 1 or result["status"] != "pass")
            sys.stdout.flush()
        if not args.file:
            progress.update(record(ex, result, file, graded))
    if args.json:
        print(jsontext.dumps(results, ensure_ascii=False, indent=1))
    elif "tiny" in str(model) and any(ex.uses_model for ex in exercises):    # a pure function: no checkpoint
        print(T("(graded on the built-in tiny checkpoint; with the real model on disk the same checks use its tensors)",
                "（用内置小检查点评测；磁盘上有真实模型时，同样的检查会使用它的张量）"))
    return 0 if all(r["status"] == "pass" for r in results) else 1


def cmd_all(args):
    """--all: grade every exercise the learner has started (its file exists); create no file and
    record nothing for the others, and say which were skipped."""
    started = [ex for ex in EXERCISES if (WORK / ex.filename).is_file()]
    skipped = [ex.id for ex in EXERCISES if ex not in started]
    code = cmd_grade(started, args, create=False) if started else 0
    if skipped and not args.json:
        print(T("Not started, so not graded: {ids} (python practice/judge.py {first} starts one).",
                "还没开始，所以没有评测：{ids}（python practice/judge.py {first} 开始一个）。",
                ids=T(", ", "、").join(skipped), first=skipped[0]))
    elif args.json and not started:
        print("[]")
    return code


def cmd_watch(ex, args):
    path = Path(args.file).resolve() if args.file else learner_file(ex)
    print(T("Watching {f} by polling every 0.5 s (Ctrl-C to stop).", "每 0.5 秒检查一次 {f} 是否改动（Ctrl-C 停止）。",
            f=path), flush=True)
    seen = None
    try:
        while True:
            try:
                stamp = path.stat().st_mtime_ns
            except FileNotFoundError:
                stamp = None
            if stamp != seen:
                seen = stamp
                print("\n" + time.strftime("%H:%M:%S"))
                if stamp is None:                                # deleted or being replaced: never recreated here
                    print(T("{f} is gone; waiting for it to be saved again.", "{f} 不见了；等待它被重新保存。", f=shown(path)))
                else:
                    cmd_grade([ex], args, create=False)          # progress re-read under the lock at each save
                sys.stdout.flush()
            time.sleep(0.5)
    except KeyboardInterrupt:                                    # the way to stop watching (the sandbox is ended)
        return 0


def cmd_hint(ex, args):
    """The first failing case (what it tests, what to look at), then the next hint of the statement; when a
    known mistake is named with the hint about its part, that hint instead (the next may be about a right part)."""
    file = Path(args.file).resolve() if args.file else learner_file(ex)
    result = grade(ex, file, model_for_checks(args))
    first = None if result["status"] == "pass" else first_failing(result)
    aimed = (first.get("diagnosis") or {}).get("hint") if first and not result["error"] else None
    aimed = aimed if type(aimed) is int and 0 <= aimed < len(ex.hints) else None
    if result["error"]:
        print(T("Your file: {m}", "你的文件：{m}", m=result["error"]["message"]))
    elif result["status"] == "pass":
        print(T("Your file passes every case; the hints below are for reference.", "你的文件已通过所有用例；下面的提示仅供参考。"))
    elif first and not first["todo"]:
        print(T("First failing case: {c}", "第一个未通过的用例：{c}", c=case_line(first)))
        if first.get("about") and aimed is None:                 # a located mistake may lie outside the case's topic
            print(T("  It tests: {a}", "  它检查的是：{a}", a=first["about"]))
    elif first:
        print(T("Start with {f}: the first case is {n} ({a}).", "从 {f} 开始：第一个用例是 {n}（{a}）。", f=first["function"],
                n=first["name"], a=first.get("about") or ""))
    if aimed is not None:                                        # the hint about the part that is wrong, not the next one
        print(T("Hint {i}/{n}, for this mistake: {h}", "提示 {i}/{n}（针对这个错误）：{h}", i=aimed + 1, n=len(ex.hints),
                h=text(ex.hints[aimed])))
        return 0

    def change(p):
        entry = p.setdefault(ex.id, {})
        entry["hints"] = min(entry.get("hints", 0) + 1, len(ex.hints))
    level = progress.update(change).get(ex.id, {}).get("hints", 1)
    for i in range(level):
        print(T("Hint {i}/{n}: {h}", "提示 {i}/{n}：{h}", i=i + 1, n=len(ex.hints), h=text(ex.hints[i])))
    if level == len(ex.hints):
        print(T("(that was the last hint)", "（这是最后一条提示）"))
    return 0


def cmd_solution(ex):
    if not progress.load().get(ex.id, {}).get("passed"):
        raise UsageError(T("The reference solution of {id} is shown after you pass it: python practice/judge.py {id}"
                           " (try --hint).", "{id} 的参考答案要在你通过之后才能看：python practice/judge.py {id}（可以试试 --hint）。",
                           id=ex.id))
    print(ex.solution.read_text(encoding="utf-8"))
    return 0


def refuse_link(path, what):
    """A UsageError when the learner's file is a symbolic link: the judge writes only the file itself, and
    writing through a link would change whatever it points to."""
    if os.path.islink(path):
        raise UsageError(T("{f} is a link: {w} writes the file in the practice folder itself, never through a link. "
                           "Replace the link by the file (copy what it points to), then try again",
                           "{f} 是一个链接：{w} 只写练习文件夹里的文件本身，从不通过链接写。请把链接换成文件（复制它指向的内容），再试一次",
                           f=shown(path), w=what))


def cmd_reset(ex):
    path = WORK / ex.filename
    if not os.path.lexists(path):                                # never started: nothing to put back
        print(T("{f} does not exist yet: nothing to reset (python practice/judge.py {id} creates it).",
                "{f} 还不存在：没有可恢复的（python practice/judge.py {id} 会创建它）。", f=shown(path), id=ex.id))
        return 0
    refuse_link(path, "--reset")
    try:
        mine = read_regular(path)                                # a folder, a device or a pipe is left alone
        stamp = time.strftime("%Y%m%d-%H%M%S")
        backup, n = WORK / ".backup" / f"{path.stem}.{stamp}.py", 1
        while os.path.lexists(backup):                           # two resets in one second
            backup, n = backup.with_name(f"{path.stem}.{stamp}-{n}.py"), n + 1
        backup.parent.mkdir(parents=True, exist_ok=True)
        with open(backup, "xb") as f:
            f.write(mine)
        print(T("Your version is saved as {b}.", "你的版本已备份为 {b}。", b=shown(backup)))
        write_atomic(path, ex.starter.read_bytes())             # a rename: the file itself, never a link's target
    except OSError as e:                                         # nothing replaced without its backup
        raise UsageError(T("--reset left {f} as it is ({e}): move it away yourself, then run --reset again",
                           "--reset 没有改动 {f}（{e}）：请先自己把它移走，再运行 --reset",
                           f=shown(path), e=e.strerror or e)) from None

    def change(p):
        entry = p.setdefault(ex.id, {})
        entry.update(status="new", file_digest=digest(path))    # "not started" again; a past pass is kept
    progress.update(change)
    print(T("{f} is the starter again.", "{f} 已恢复成起始文件。", f=shown(path)))
    return 0


def verified_exercises(ids):
    """The exercises --verify checks: all, or those of a comma-separated list such as 240,241,242."""
    if ids is None:
        return EXERCISES
    wanted = [i.strip() for i in ids.split(",") if i.strip()]
    unknown = [i for i in wanted if i not in BY_ID]
    if unknown or not wanted:
        raise UsageError(T("there is no exercise {e}; the exercises are {ids}", "没有练习 {e}；现有的练习是 {ids}",
                           e=", ".join(unknown) or ids, ids=", ".join(BY_ID)))
    return [BY_ID[i] for i in wanted]


def cmd_verify(args):
    """References and equivalent forms pass with no diagnosis on any case; starters are unfinished;
    each known-wrong file fails with the diagnosis named for it; every diagnosis is proven by one."""
    set_lang("en")
    model = model_for_checks(args)
    problems = checks = 0

    def line(ok, ex, file, status, message):
        nonlocal problems, checks
        checks += 1
        problems += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {ex.id} {file.parent.name}/{file.name:<28} {status:<5} {message}")

    for ex in verified_exercises(args.exercise):
        for ref in [ex.solution] + ex.equivalents():
            r = grade(ex, ref, model, explain_all=True)
            fired = sorted({c["diagnosis"]["name"] for c in r["cases"] if c.get("diagnosis")})
            line(r["status"] == "pass" and not fired, ex, ref, r["status"],
                 summary_line(r) + (f"; diagnoses fired on it: {fired}" if fired else ""))
        r = grade(ex, ex.starter, model)
        line(r["status"] == "todo", ex, ex.starter, r["status"], summary_line(r))
        proven = set()
        for name, want in ex.wrong.items():
            file = JUDGE / "wrong" / name
            r = grade(ex, file, model)
            fired = {c["diagnosis"]["name"] for c in r["cases"] if c.get("diagnosis")}
            wants = (want,) if isinstance(want, str) else tuple(want or ())
            proven |= fired & set(wants)
            ok = r["status"] != "pass" and all(w in fired for w in wants)
            line(ok, ex, file, r["status"], summary_line(r) + ("" if ok else f"  [wanted {list(wants)}, fired {sorted(fired)}]"))
        for d in ex.diagnoses:
            if d.name not in proven:
                checks += 1
                problems += 1
                print(f"FAIL {ex.id} diagnosis {d.name!r} is proven by no file in wrong/")
    print(T("verify: {n} checks, {p} problem(s)", "verify：{n} 项检查，{p} 个问题", n=checks, p=problems))
    return 0 if problems == 0 else 1


def main(argv=None):
    import signal
    if signal.getsignal(signal.SIGINT) is _stopped_while_starting:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    p = parser("The practice judge: grade the exercises offline, on the model's tensors.",
               "练习评测器：离线评测练习，使用模型的张量。")
    p.add_argument("exercise", nargs="?", help=T("exercise number, e.g. 204", "练习编号，例如 204"))
    p.add_argument("--all", action="store_true", help=T("grade every exercise you have started",
                                                        "评测所有你已经开始的练习"))
    p.add_argument("--file", help=T("grade this file instead of practice/2xx_*.py", "评测这个文件，而不是 practice/2xx_*.py"))
    p.add_argument("--watch", action="store_true", help=T("regrade on every save", "每次保存后重新评测"))
    p.add_argument("--hint", action="store_true", help=T("your first failing case, then the next hint",
                                                         "你的第一个未通过的用例，以及下一条提示"))
    p.add_argument("--solution", action="store_true", help=T("show the reference solution (after passing)",
                                                             "显示参考答案（通过之后）"))
    p.add_argument("--reset", action="store_true", help=T("restore the starter (keeps a backup)", "恢复起始文件（会备份）"))
    p.add_argument("--verify", action="store_true", help=T("prove that the checks can pass and fail",
                                                           "证明检查既能通过也能失败"))
    p.add_argument("--json", action="store_true", help=T("machine-readable output", "机器可读的输出"))
    p.add_argument("--web", action="store_true", help=T("practise in the browser: a page on 127.0.0.1 (Ctrl-C stops it)",
                                                        "在浏览器里练习：127.0.0.1 上的页面（按 Ctrl-C 停止）"))
    p.add_argument("--no-browser", action="store_true", help=T("with --web: print the address, do not open a browser",
                                                               "与 --web 一起用：只打印地址，不打开浏览器"))
    p.add_argument("--port", type=int, default=0, help=T("with --web: the port (default: any free one)",
                                                         "与 --web 一起用：端口（默认：任意空闲端口）"))
    try:
        args = setup(p, argv)
    except SystemExit as e:                                      # argparse: usage errors exit 2
        return e.code
    try:
        return run(args)
    except UsageError as e:
        print(T("judge: ", "评测器：") + str(e), file=sys.stderr)
        return 2
    except grading.ModelProblem as e:
        if args.debug:
            raise
        print(T("judge: ", "评测器：") + str(e), file=sys.stderr)
        return 2
    except QwenError as e:
        if args.debug:
            raise
        report(e)
        return 1
    except KeyboardInterrupt:                                    # the sandbox was ended on the way out
        print(T("\nStopped.", "\n已停止。"), file=sys.stderr)
        return 130


def run(args):
    time_limit()                                                 # bad limits: one line before anything else
    memory_limit()
    if args.verify or args.all or (args.exercise and not (args.solution or args.reset)):
        from practice._judge import sandbox
        sandbox.prestart()                                       # its interpreter starts while the judge reads the model
    if args.verify:
        return cmd_verify(args)
    if args.web:
        if args.exercise or args.all or args.file or args.watch or args.hint or args.solution or args.reset:
            raise UsageError(T("--web shows every exercise: leave out the number and the other commands",
                               "--web 会显示所有练习：不要再给编号或别的命令"))
        if not 0 <= args.port <= 65535:
            raise UsageError(T("--port {p}: give a port from 1 to 65535 (or 0: any free one)",
                               "--port {p}：请给出 1 到 65535 之间的端口（或 0：任意空闲端口）", p=args.port))
        from practice._judge import web
        return web.serve(sys.modules[__name__], args)
    actions = [a for a in ("all", "watch", "hint", "solution", "reset") if getattr(args, a)]
    if len(actions) > 1:
        raise UsageError(T("use one of --{a} at a time", "一次只能用 --{a} 中的一个", a=", --".join(actions)))
    if args.exercise is None and not args.all:
        if actions or args.file:
            raise UsageError(T("say which exercise, e.g. python practice/judge.py 204 --{a}",
                               "请指明练习编号，例如 python practice/judge.py 204 --{a}", a=(actions or ["file"])[0]))
        return cmd_list(args.json)
    if args.all:
        if args.exercise or args.file:
            raise UsageError(T("--all grades every exercise: leave out the number and --file",
                               "--all 会评测所有练习：不要再给编号或 --file"))
        return cmd_all(args)
    ex = BY_ID.get(args.exercise)
    if ex is None:
        raise UsageError(T("there is no exercise {e}; the exercises are {ids}", "没有练习 {e}；现有的练习是 {ids}",
                           e=args.exercise, ids=", ".join(BY_ID)))
    if args.file and not Path(args.file).is_file():
        raise UsageError(T("--file {f}: no such file", "--file {f}：文件不存在", f=args.file))
    if args.hint:
        return cmd_hint(ex, args)
    if args.solution:
        return cmd_solution(ex)
    if args.reset:
        return cmd_reset(ex)
    if args.watch:
        return cmd_watch(ex, args)
    return cmd_grade([ex], args)


if __name__ == "__main__":
    sys.exit(main())
