"""Grading one exercise, in the judge's process: build the cases, start a sandbox with their inputs,
compare what comes back with the expected values computed here, name known mistakes.

Used by practice/judge.py (the learner's file) and practice.check (functions from a notebook).
"""
import os
import tempfile
from pathlib import Path

from practice._judge import portable, sandbox, wire
from practice._judge.compare import Mismatch, Raised, check_tensor, check_value, close, describe_input
from practice._judge.exercises import Context, text
from practice._judge.files import read_regular
from qwen.lang import T, get_lang

MEMORY = 3 * 2**30                                 # what a solution may add to the sandbox's memory
_contexts = {}


class ModelProblem(Exception):
    """The model to grade on could not be read: the learner's code is not at fault (one line)."""


def context(model, scratch):
    """The model's tensors for the cases (cached per model path), with this grading's scratch folder."""
    key = str(model)
    if key not in _contexts:
        try:
            _contexts[key] = Context(model, scratch)
        except Exception as e:                                     # noqa: BLE001 - any way a checkpoint can be broken
            raise ModelProblem(T("the model at {p} could not be read ({e}): check --model / QWEN_MODEL, or use --tiny",
                                 "无法读取 {p} 处的模型（{e}）：请检查 --model / QWEN_MODEL，或使用 --tiny",
                                 p=model, e=str(e).splitlines()[0] if str(e) else type(e).__name__)) from e
    ctx = _contexts[key]
    ctx.scratch = Path(scratch)
    return ctx


def source_problem(file):
    """One line when the file cannot be read as Python reads it (encoding, NUL byte, syntax), else None."""
    try:
        data = read_regular(file)
    except OSError as e:
        return "read", T("cannot read {f}: {e}", "无法读取 {f}：{e}", f=file, e=e.strerror or e)
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "encoding", T("the file is saved as UTF-16; Python reads source files as UTF-8: save it as UTF-8",
                             "文件是以 UTF-16 保存的；Python 按 UTF-8 读取源文件：请另存为 UTF-8")
    try:
        compile(data, str(file), "exec", dont_inherit=True)
    except SyntaxError as e:
        msg = str(e.msg or "")
        if "null bytes" in msg:
            return _nul(data)
        if e.lineno is None or "unicode error" in msg or "Non-UTF-8" in msg or "codec" in msg or "encoding" in msg:
            line = e.lineno or _bad_utf8_line(data)
            return "encoding", T("line {n} cannot be decoded ({m}): save the file as UTF-8, or declare its encoding "
                                 "on the first line: # -*- coding: latin-1 -*-",
                                 "第 {n} 行无法解码（{m}）：请把文件存为 UTF-8，或在第一行声明编码：# -*- coding: latin-1 -*-",
                                 n=line, m=msg.splitlines()[0][:120])
        return "syntax", T("syntax error on line {n}: {m}", "第 {n} 行有语法错误：{m}", n=e.lineno, m=msg)
    except ValueError as e:
        if "null bytes" in str(e):
            return _nul(data)
        return "syntax", str(e)
    except (RecursionError, MemoryError):                        # python file.py fails the same way
        return "syntax", T("Python cannot compile the file: an expression is nested or chained too deeply "
                           "(thousands of operators or brackets in one line?)",
                           "Python 无法编译这个文件：某个表达式嵌套或连接得太深（一行里有成千上万个运算符或括号？）")
    return None


def _nul(data):
    line = data[:data.index(b"\0")].count(b"\n") + 1 if b"\0" in data else "?"
    return "encoding", T("the file contains a NUL byte (line {n}): not a text file, or saved as UTF-16? Save it as UTF-8",
                         "文件里有 NUL 字节（第 {n} 行）：不是文本文件，或者存成了 UTF-16？请另存为 UTF-8", n=line)


def _bad_utf8_line(data):
    for n, line in enumerate(data.split(b"\n"), 1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            return n
    return "?"


def printable(text, limit=400):
    """Text from the sandbox as one printable line: control characters (terminal escapes that could
    redraw the report, carriage returns) shown escaped."""
    text = str(text)[:limit]
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def error_result(ex, file, kind, message):
    return {"exercise": ex.id, "file": str(file), "status": "error", "cases": [], "error": {"kind": kind, "message": message},
            "printed": 0, "note": None}


def grade(ex, model, *, file=None, functions=None, time_limit=20.0, memory=MEMORY, explain_all=False):
    """Grade `file` (a path) or `functions` ({name: function}, notebook) for exercise `ex` on `model`.
    Returns a plain result dict. explain_all: run diagnoses on every case, passing or not (--verify)."""
    label = str(file) if file else "<notebook>"
    if file:
        problem = source_problem(file)
        if problem:
            return error_result(ex, label, *problem)
    job = {"functions": ex.functions, "file": os.path.abspath(file) if file else None, "portable": None,
           "lang": get_lang(), "check_inputs": not ex.may_modify_inputs}
    if functions:                                                 # a notebook's functions travel as their source
        try:
            job["portable"] = portable.pack(functions)
        except portable.NotPortable as e:
            return error_result(ex, label, "source", str(e))
    box = sandbox.Sandbox(job, memory, time_limit)
    try:
        with tempfile.TemporaryDirectory() as scratch:
            cases = ex.cases(context(model, scratch))           # expected values: here, never in the sandbox
            value, blobs = wire.encode(tuple(tuple(c.args) for c in cases), keep_layout=True)
            encoded = [{"function": c.function, "args": args} for c, args in zip(cases, value["U"])]
            got, after, state = {}, {}, {"fatal": None, "printed": 0, "done": False, "note": None}

            def on_frame(header, frame_blobs):
                kind, i = header.get("kind"), header.get("i")
                case = type(i) is int and 0 <= i < len(cases)
                if kind == "started":
                    state["note"] = printable(header["note"]) if isinstance(header.get("note"), str) else None
                elif kind == "case" and case:
                    raised = header.get("raised")
                    got[i] = Raised(str(raised.get("kind", "exception")), printable(raised.get("message", ""))) \
                        if isinstance(raised, dict) else wire.decode(header.get("value"), frame_blobs)
                elif kind == "inputs" and case:
                    after[i] = (header.get("digests"), header.get("names"))
                elif kind == "fatal" and isinstance(header.get("error"), dict):
                    state["fatal"] = {"kind": str(header["error"].get("kind")), "message": printable(header["error"].get("message"))}
                    return True
                elif kind == "done":
                    state.update(done=True, printed=header.get("printed") if type(header.get("printed")) is int else 0)
                    return True
                return False

            if not box.send({"kind": "inputs", "cases": encoded}, blobs):
                return error_result(ex, label, *box.ending())
            box.collect(on_frame)
            box.kill()                                            # stray threads and children end with the grading
            result = {"exercise": ex.id, "file": label, "status": "error", "cases": [], "error": state["fatal"],
                      "printed": state["printed"], "note": state["note"]}
            if state["fatal"]:
                return result
            stopped = None if state["done"] else box.ending()
            digested = {}                                         # the judge's digests, once per input object
            for i, case in enumerate(cases):
                value = got.get(i)
                if not ex.may_modify_inputs and value is not None and not isinstance(value, Raised):
                    value = modified_inputs(case, after.get(i), digested) or value
                result["cases"].append(_judge_case(ex, case, value, i, stopped, explain_all))
                if i not in got and stopped:
                    stopped = ("after", T("not run (the grading stopped at an earlier case)", "未运行（评测在前面的用例中止了）"))
            if stopped and not got:
                result["error"] = dict(zip(("kind", "message"), box.ending()))
                return result
            result["status"] = "pass" if all(c["ok"] for c in result["cases"]) else (
                "todo" if all(c["ok"] or c["todo"] for c in result["cases"]) else "fail")
            return result
    finally:
        box.close()


def modified_inputs(case, after, cache=None):
    """A Raised "inplace" when the sandbox's inputs after the call differ from the judge's own copy
    (compared here: nothing the solution patched in the sandbox decides it), else None."""
    digests, names = after if isinstance(after, tuple) else (None, None)
    if type(digests) is not list or len(digests) != len(case.args):
        return Raised("inplace", T("the inputs did not come back after the call, so the judge cannot tell whether "
                                   "they were changed", "调用之后输入没有传回，评测器无法判断它们是否被修改"))
    mine = wire.digests(case.args, cache)
    changed = [k for k, (a, b) in enumerate(zip(mine, digests)) if a != b]
    if not changed:
        return None
    k = changed[0]
    name = names[k] if type(names) is list and len(names) == len(case.args) and isinstance(names[k], str) else f"#{k + 1}"
    return Raised("inplace", T("modified its input {a} in place: work on a copy (no in-place ops on inputs)",
                               "原地修改了输入 {a}：请在副本上计算（不要对输入做原地操作）", a=printable(name, 80)))


def _judge_case(ex, case, got, index, stopped, explain_all):
    entry = {"function": case.function, "name": text(case.name), "ok": False, "todo": False, "message": "",
             "diagnosis": None, "about": text(case.about) if case.about else None,
             "detail": {"inputs": [describe_input(a) for a in case.args]}}
    if got is None:
        entry["message"] = stopped[1] if stopped else T("no result came back", "没有收到结果")
        entry["stopped"] = True
        return entry
    if isinstance(got, Raised):
        entry["todo"] = got.kind == "todo"
        entry["message"] = got.message
    else:
        try:
            if case.check is not None:
                case.check(got)
            elif hasattr(case.expected, "dtype") and hasattr(case.expected, "shape"):
                check_tensor(case.expected, got, case.tol)
            else:
                check_value(case.expected, got, case.function, tol=case.tol)
            entry["ok"] = True
        except Mismatch as m:
            entry["message"] = m.summary
            entry["detail"].update(m.detail)
        except Exception as e:                                     # noqa: BLE001 - a check that cannot read this result:
            entry["message"] = T("returned something this case cannot check ({t}: {e})",   # failed, never a crash
                                 "返回的东西这个用例无法检查（{t}：{e}）", t=type(e).__name__, e=printable(e, 120))
    if not entry["ok"] and not entry["todo"] or explain_all:
        entry["diagnosis"] = diagnose(ex, case, got)
    return entry


def _right(case, got):
    """The case's own verdict: its check when it has one (a result other than `expected` may be right,
    e.g. another of several tied tokens), else closeness to `expected`."""
    if case.check is None:
        return close(case.expected, got, case.tol)
    try:
        case.check(got)
        return True
    except Exception:                                              # noqa: BLE001 - Mismatch, or a result the check cannot read
        return False


def diagnose(ex, case, got):
    """The first known mistake whose signature the result matches: {"name", "says", "hint"}, or None."""
    for d in ex.diagnoses:
        if d.function != case.function:
            continue
        try:
            if d.test is not None:
                fired = bool(d.test(case, got))
            else:
                tol = d.tol or case.tol
                fired = not isinstance(got, Raised) and _telling(d.mistake(*case.args), got, tol)
            if fired and not isinstance(got, Raised) and (case.expected is not None or case.check is not None):
                fired = not _right(case, got)                            # never on a right answer
        except Exception:                                          # noqa: BLE001 - a diagnosis never breaks grading
            fired = False
        if fired:
            return {"name": d.name, "says": text(d.says), "hint": d.hint}
    return None


def _telling(mistaken, got, tol):
    """`got` matches the mistaken result, and that result says something: a signature that zeros also
    match (220's g = -30 case, where the decay after the write leaves ~1e-13) would name that mistake
    for any all-zero result."""
    if not close(mistaken, got, tol):
        return False
    tensors = [t for t in (mistaken.values() if isinstance(mistaken, dict) else
                           mistaken if isinstance(mistaken, (tuple, list)) else [mistaken])
               if hasattr(t, "is_floating_point") and t.is_floating_point()]
    return not tensors or not all(close(t, t.new_zeros(t.shape), tol) for t in tensors)
