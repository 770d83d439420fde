"""The sandbox's side of a grading: run the learner's functions on the inputs, send back plain data.

Nothing is compared here (the judge does that in its own process, on values it computed
itself): this file only loads the learner's file (as `python file.py` reads it: BOM, coding
line; registered in sys.modules while it runs), calls each function on the inputs the judge
sent, and sends each result or what was raised instead (wire.py: never pickle).
"""
import importlib.util
import inspect
import os
import re
import sys
import traceback
import types
from pathlib import Path

from practice._judge import sandbox, wire
from practice._judge.files import read_regular


def learner_line(tb, file):
    """The last line of the learner's file in a traceback, or None."""
    if not file:
        return None
    try:
        target = Path(file).resolve()
        lines = [f.lineno for f in traceback.extract_tb(tb) if Path(f.filename).resolve() == target]
    except Exception:                                          # noqa: BLE001
        return None
    return lines[-1] if lines else None


def _message(exc):
    """'Type: message', even when the exception's __str__ raises."""
    from qwen.lang import T
    name = wire._type_name(exc)
    try:
        text = str(exc)
        text = str.__str__(text) if isinstance(text, str) else ""
    except BaseException:                                      # noqa: BLE001
        return T("{t} (its message could not be read)", "{t}（它的消息无法读取）", t=name)
    first = (text.splitlines() or [""])[0][:300]
    return f"{name}: {first}" if first else name


def _argument(fn, k):
    """The name the learner gave argument k (0-based), then its position: 'S (#1)'; '#1' alone when
    the function does not say (a callable object without a signature, say)."""
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        return f"{params[k].name} (#{k + 1})"
    except Exception:                                            # noqa: BLE001 - learner code can be odd
        return f"#{k + 1}"


def describe_error(exc, file, memory_gb):
    """(kind, one line) for an exception raised by learner code."""
    from qwen.lang import T
    if isinstance(exc, MemoryError) or "can't allocate memory" in _message(exc) or "Cannot allocate memory" in _message(exc):
        return "memory", T("tried to allocate more memory than the {gb:g} GB allowed (a huge tensor or read?)",
                           "申请的内存超过了允许的 {gb:g} GB（张量或读取的数据太大了？）", gb=memory_gb)
    line = learner_line(exc.__traceback__, file)
    where = T(" (line {n} of your file)", "（你的文件第 {n} 行）", n=line) if line else ""
    return "exception", _message(exc) + where


def module_name(file):
    return "practice_" + re.sub(r"\W", "_", Path(file).stem)


def load_module(file):
    """Run the learner's file as a module registered in sys.modules (so dataclasses, typing and pickle
    find it). Its folder is first on sys.path, as with `python file.py`; __name__ is not "__main__"."""
    name = module_name(file)
    code = compile(read_regular(file), str(file), "exec", dont_inherit=True)
    module = types.ModuleType(name)
    module.__file__ = str(file)
    module.__spec__ = importlib.util.spec_from_loader(name, loader=None, origin=str(file))
    sys.modules[name] = module
    sys.path.insert(0, str(Path(file).resolve().parent))
    exec(code, module.__dict__)
    return module.__dict__


def child_main(job):
    """job: {exercise, functions (names), file or None, found (name -> function, notebook mode), lang, memory,
    check_inputs (send the inputs' digests after each call)}.
    Returns the function the sandbox runs: fn(sock, capture, note)."""

    def run(sock, capture, note):
        import torch
        from qwen.lang import T, set_lang
        set_lang(job["lang"])
        torch.set_num_threads(1)
        memory_gb = round(job["memory"] / 2**30, 2)

        def send(header, blobs=()):
            sock.setblocking(True)
            sock.sendall(wire.pack(header, list(blobs)))

        header, blobs = sandbox.read_frame(sock)                 # the inputs, built by the judge after the fork
        cases = [(c["function"], wire.decode(c["args"], blobs, trusted=True)) for c in header["cases"]]
        send({"kind": "started", "note": note})
        file = job.get("file")
        if job.get("portable"):
            from practice._judge import portable
        if not (file and sandbox.is_judge_file(file)):           # the judge's own wrong/ files reuse its references
            sandbox.seal()                                       # from here on, the judge's modules cannot be imported
        try:
            if file:
                space = load_module(file)
            elif job.get("portable"):                            # notebook functions sent as source (spawned)
                space = portable.unpack(job["portable"])
            else:
                space = dict(job["found"])
        except SystemExit:
            return send({"kind": "fatal", "error": {"kind": "exit", "message": T(
                "your file calls sys.exit() (or exit()) when imported: remove it",
                "你的文件在导入时调用了 sys.exit()（或 exit()）：请删掉")}})
        except ImportError as e:
            return send({"kind": "fatal", "error": {"kind": "import", "message": T("import failed: {m}", "导入失败：{m}",
                                                                                    m=_message(e))}})
        except BaseException as e:                               # noqa: BLE001 - learner code can raise anything
            kind, message = describe_error(e, file, memory_gb)
            return send({"kind": "fatal", "error": {"kind": kind, "message": T(
                "error while importing your file: {m}", "导入你的文件时出错：{m}", m=message)}})
        for name in job["functions"]:
            if not callable(space.get(name)):
                where = Path(file).name if file else T("the functions you passed", "你传入的函数")
                return send({"kind": "fatal", "error": {"kind": "missing", "message": T(
                    "no function named {f} in {file}: keep the names from the starter",
                    "{file} 里没有名为 {f} 的函数：请保留起始文件里的函数名", f=name, file=where)}})

        for i, (name, args) in enumerate(cases):
            try:
                got = space[name](*args)
            except NotImplementedError:
                send({"kind": "case", "i": i, "raised": {"kind": "todo", "message": T(
                    "not written yet (raises NotImplementedError)", "还没写（抛出 NotImplementedError）")}})
                continue
            except SystemExit:
                send({"kind": "case", "i": i, "raised": {"kind": "exit", "message": T("called sys.exit()", "调用了 sys.exit()")}})
                continue
            except BaseException as e:                           # noqa: BLE001
                kind, message = describe_error(e, file, memory_gb)
                send({"kind": "case", "i": i, "raised": {"kind": kind, "message": message}})
                continue
            if job.get("check_inputs"):                          # the judge compares them with its own copy
                try:
                    after = wire.digests(args)
                except BaseException:                            # noqa: BLE001 - an input made unreadable
                    after = ["unreadable"] * len(args)
                send({"kind": "inputs", "i": i, "digests": after,
                      "names": [_argument(space[name], k) for k in range(len(args))]})
            try:
                value, out = wire.encode(got, limit=wire.MAX_RESULT)
            except wire.Unsupported as e:
                send({"kind": "case", "i": i, "raised": {"kind": "unsupported", "message": T(
                    "returned {what}", "返回了{what}", what=str(e))}})
                continue
            except BaseException:                                # noqa: BLE001 - a hostile object
                send({"kind": "case", "i": i, "raised": {"kind": "unsupported", "message": T(
                    "returned a value of type {t}, which the judge cannot read", "返回了 {t} 类型的值，评测器读不了", t=wire._type_name(got))}})
                continue
            frame = wire.pack({"kind": "case", "i": i, "value": value}, out)
            if len(frame) > wire.MAX_RESULT:                     # e.g. a list of millions of numbers
                send({"kind": "case", "i": i, "raised": {"kind": "unsupported", "message": T(
                    "returned {mb:,.0f} MB of data: too large to send back (at most {m:.0f} MB)",
                    "返回了 {mb:,.0f} MB 的数据：太大，无法传回（最多 {m:.0f} MB）", mb=len(frame) / 2**20,
                    m=wire.MAX_RESULT / 2**20)}})
                continue
            sock.setblocking(True)
            sock.sendall(frame)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:                                    # noqa: BLE001
                pass
        send({"kind": "done", "printed": sandbox.count_printed(capture)})
        os._exit(0)                                              # stray threads end here, unheard

    return run
