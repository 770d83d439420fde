"""The sandbox's side: a fresh Python process that runs the learner's functions and sends back plain data.

    python -m practice._judge.runner            started by the judge (sandbox.py) per grading, never by hand
    python -m practice._judge.runner --server   (Linux) started once by the judge: forks that process per grading

It imports torch and says it is ready; then it reads one frame (which functions, the learner's file
or notebook source, the limits, the inputs), sets its limits (confine.py), loads the learner's file
as `python file.py` reads it (BOM, coding line; registered in sys.modules while it runs), calls each
function on the inputs and writes each result, or what was raised instead, as plain data on its
stdout (wire.py: never pickle). When the judge goes (its pipe closes), every process the learner's
code started ends, and this one.

Nothing is compared here: the judge does that in its own process, on values it computed itself.
"""
import importlib.util
import inspect
import io
import os
import re
import signal
import sys
import threading
import traceback
import types
from pathlib import Path

from practice._judge import confine, portable, wire
from practice._judge.files import read_regular
from practice._judge.sandbox import BROKEN, kill_tree, private_memory


def learner_line(tb, file):
    """The last line of the learner's file in a traceback, or None."""
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
    """{kind, message} for an exception raised by learner code."""
    from qwen.lang import T
    message = _message(exc)
    if isinstance(exc, MemoryError) or "can't allocate memory" in message or "Cannot allocate memory" in message:
        return {"kind": "memory", "message": T(
            "tried to allocate more memory than the {gb:g} GB allowed (a huge tensor or read?)",
            "申请的内存超过了允许的 {gb:g} GB（张量或读取的数据太大了？）", gb=memory_gb)}
    line = learner_line(exc.__traceback__, file) if file else None
    where = T(" (line {n} of your file)", "（你的文件第 {n} 行）", n=line) if line else ""
    return {"kind": "exception", "message": message + where}


def load_module(file):
    """Run the learner's file as a module registered in sys.modules (so dataclasses, typing and pickle
    find it). Its folder is first on sys.path, as with `python file.py`; __name__ is not "__main__"."""
    name = "practice_" + re.sub(r"\W", "_", Path(file).stem)
    code = compile(read_regular(file), str(file), "exec", dont_inherit=True)
    module = types.ModuleType(name)
    module.__file__ = str(file)
    module.__spec__ = importlib.util.spec_from_loader(name, loader=None, origin=str(file))
    sys.modules[name] = module
    sys.path.insert(0, str(Path(file).resolve().parent))
    exec(code, module.__dict__)
    return module.__dict__


def run(job, blobs, send):
    """Set the limits, load the learner's functions, call them on the inputs, send each result. job: {functions
    (names), file or None, portable (notebook source) or None, lang, memory, folder, check_inputs (send
    the inputs' digests after each call), cases}. Never returns."""
    code = BROKEN
    try:
        capture, note = confine.enter(job)
        _run(job, blobs, send, capture, note)
        code = 0
    except BaseException:                                    # noqa: BLE001 - the plumbing broke: the judge says so
        code = BROKEN
    finally:
        try:
            kill_tree(os.getpid())                           # what it started ends with it
        finally:
            os._exit(code)                                   # stray threads end here, unheard


def _load(job, memory_gb):
    """(the learner's functions by name, None), or (None, {kind, message}) when they cannot be had."""
    from qwen.lang import T
    file = job.get("file")
    try:
        space = load_module(file) if file else portable.unpack(job["portable"])   # a notebook's, sent as source
    except SystemExit:
        return None, {"kind": "exit", "message": T("your file calls sys.exit() (or exit()) when imported: remove it",
                                                   "你的文件在导入时调用了 sys.exit()（或 exit()）：请删掉")}
    except ImportError as e:
        return None, {"kind": "import", "message": T("import failed: {m}", "导入失败：{m}", m=_message(e))}
    except BaseException as e:                               # noqa: BLE001 - learner code can raise anything
        error = describe_error(e, file, memory_gb)
        return None, {**error, "message": T("error while importing your file: {m}", "导入你的文件时出错：{m}",
                                            m=error["message"])}
    for name in job["functions"]:
        if not callable(space.get(name)):
            where = Path(file).name if file else T("the functions you passed", "你传入的函数")
            return None, {"kind": "missing", "message": T("no function named {f} in {file}: keep the names from the starter",
                                                          "{file} 里没有名为 {f} 的函数：请保留起始文件里的函数名",
                                                          f=name, file=where)}
    return space, None


def _call(fn, args, file, memory_gb):
    """(the result, None), or (None, {kind, message}) for what the call did instead of returning."""
    from qwen.lang import T
    try:
        return fn(*args), None
    except NotImplementedError:
        return None, {"kind": "todo", "message": T("not written yet (raises NotImplementedError)",
                                                   "还没写（抛出 NotImplementedError）")}
    except SystemExit:
        return None, {"kind": "exit", "message": T("called sys.exit()", "调用了 sys.exit()")}
    except BaseException as e:                               # noqa: BLE001
        return None, describe_error(e, file, memory_gb)


def _run(job, blobs, send, capture, note):
    import torch
    from qwen.lang import T, set_lang
    set_lang(job["lang"])
    torch.set_num_threads(1)
    memory_gb = round(job["memory"] / 2**30, 2)
    cases = [(c["function"], wire.decode(c["args"], blobs, trusted=True)) for c in job["cases"]]
    send({"kind": "started", "note": note, "base": private_memory()})   # before any of the learner's code
    space, fatal = _load(job, memory_gb)
    if fatal:
        return send({"kind": "fatal", "error": fatal})
    for i, (name, args) in enumerate(cases):
        got, raised = _call(space[name], args, job.get("file"), memory_gb)
        if raised:
            send({"kind": "case", "i": i, "raised": raised})
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
            frame = wire.pack({"kind": "case", "i": i, "value": value}, out)
            wire.check_size(frame)                           # what the judge would refuse, said here in words
        except wire.Unsupported as e:
            frame = wire.pack({"kind": "case", "i": i, "raised": {"kind": "unsupported", "message": T(
                "returned {what}", "返回了{what}", what=str(e))}}, [])
        except BaseException:                                # noqa: BLE001 - a hostile object
            frame = wire.pack({"kind": "case", "i": i, "raised": {"kind": "unsupported", "message": T(
                "returned a value of type {t}, which the judge cannot read", "返回了 {t} 类型的值，评测器读不了",
                t=wire._type_name(got))}}, [])
        send(frame)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:                                    # noqa: BLE001
            pass
    send({"kind": "done", "printed": count_printed(capture)})


def count_printed(capture):
    try:
        capture.flush()
        capture.seek(0)
        text = io.TextIOWrapper(capture, encoding="utf-8", errors="replace").read()
        return len([line for line in text.splitlines() if line.strip()])
    except (OSError, ValueError):
        return 0


# ------------------------------------------------------------------------------------------ the process

def _exit_when_judge_gone(fd):
    """The judge never writes again during a job, so EOF (or an error) on its pipe means it is gone: every
    process the learner's code started ends (those that left the group too: this process is their
    subreaper), then this one."""
    try:
        os.read(fd, 1)
    finally:
        try:
            kill_tree(os.getpid())
            if hasattr(os, "killpg"):
                os.killpg(0, signal.SIGKILL)
        finally:
            os._exit(BROKEN)


def serve():
    out = os.dup(1)                                          # the frames to the judge
    os.dup2(2, 1)                                            # a stray print of an import never reaches them
    import torch  # noqa: F401 - what every job needs, imported before the judge's clock starts
    import qwen.lang  # noqa: F401
    wire.write_all(out, wire.pack({"kind": "ready"}, []))
    confine.become_subreaper()
    try:
        job, blobs = wire.read_frame(0)
    except (EOFError, ValueError):                           # the judge is gone, or spoke nonsense
        os._exit(0)
    threading.Thread(target=_exit_when_judge_gone, args=(os.dup(0),), daemon=True).start()

    def send(frame, more=()):
        wire.write_all(out, frame if isinstance(frame, bytes) else wire.pack(frame, list(more)))
    run(job, blobs, send)


def fork_server():
    """(Linux) `python -m practice._judge.runner --server`: imports once what serve() needs, then for each
    request on its control socket (fd 0: the grading process's stdin, stdout and stderr, and a pipe for its
    pid and exit code) forks a child that becomes that process, as serve() in a fresh interpreter. It runs
    no learner code and no torch op, so it forks with one thread; it ends when the judge does (EOF)."""
    import select
    import socket
    import struct
    import torch
    import qwen.lang  # noqa: F401
    torch.set_num_threads(1)                                 # before any op: a child forked now has no thread pool
    control = socket.socket(fileno=0)
    children = {}                                            # pidfd -> (pid, the pipe its exit code goes to)
    while True:
        ready = select.select([control, *children], [], [])[0]
        for pidfd in set(ready) & set(children):
            pid, status = children.pop(pidfd)
            code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            try:
                os.write(status, struct.pack("i", code))
            except OSError:                                  # the judge no longer waits for it
                pass
            os.close(status)
            os.close(pidfd)
        if control not in ready:
            continue
        message, fds, _, _ = socket.recv_fds(control, 1, 4)
        if not message:                                      # the judge is gone
            os._exit(0)
        if len(fds) == 4:
            pid = os.fork()
            if pid == 0:
                _grading_child(fds, children)
            try:
                os.write(fds[3], struct.pack("i", pid))
            except OSError:
                pass
            children[os.pidfd_open(pid)] = (pid, fds.pop())
        for fd in fds:
            os.close(fd)


def _grading_child(fds, children):
    """In the server's child: nothing of the other gradings or of the server, then serve(). Never returns."""
    try:
        for pidfd, (_, status) in children.items():
            os.close(pidfd)
            os.close(status)
        os.setsid()                                          # a session of its own, as the judge starts one
        del sys.argv[1:]                                     # `python -m practice._judge.runner`'s
        for fd in range(3):
            os.dup2(fds[fd], fd)                             # fd 0 was the control socket
        for fd in fds:
            os.close(fd)
        serve()
    finally:
        os._exit(BROKEN)


if __name__ == "__main__":
    fork_server() if sys.argv[1:] == ["--server"] else serve()
