"""`python ARGS` for tests, without paying for `import torch` each time (about 3 s of CPU on 2 cores).

    from forkserver import python
    r = python(["main.py", "9", "--tiny"], env=..., cwd=ROOT, input=None, timeout=120)   # a CompletedProcess

Why: most tests that run a script need what a process gives (the real entry point's exit code, its
stdout and stderr, `if __name__ == "__main__"`, state that starts fresh), not a fresh interpreter.
So one server per test process imports torch once and forks a child per run; the child sets up what
`python SCRIPT ARGS` would (argv, sys.path[0], cwd, environment, stdin/stdout/stderr on files, a new
__main__ module), runs the script, and exits with its status. It is a real process: its own memory,
its own exit code, killed at the timeout.

It falls back to a real `python` where a forked one could differ: any option before the script
(-m, -X, -W, ...), and a changed environment variable that the interpreter or torch read when they
started (threads, allocator, locale, PYTHON* but PYTHONIOENCODING and PYTHONPATH, which the child
applies, TMPDIR). Tests that check what a fresh interpreter
imports, or that send signals, start their own process (subprocess), as before.
"""
import atexit
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading

# read when the interpreter or torch start: a different value needs a fresh interpreter
STARTUP_ENV = re.compile(r"^(OMP_|MKL_|KMP_|GOMP_|OPENBLAS_|TORCH|PYTORCH|MALLOC_|LD_|LC_|LANG$|LANGUAGE$|TMPDIR$|CUDA|"
                         r"PYTHON(?!IOENCODING$|PATH$))")

CUSTOMIZE = ("sitecustomize.py", "usercustomize.py", "sitecustomize", "usercustomize")

SERVER = r'''
import atexit, builtins, io, json, os, sys, threading, types
import torch, numpy                                # what every script of the course imports first

def _stream(fd, mode, encoding, errors, line_buffering):
    raw = io.FileIO(fd, mode, closefd=False)
    buffered = io.BufferedReader(raw) if mode == "r" else io.BufferedWriter(raw)
    return io.TextIOWrapper(buffered, encoding=encoding, errors=errors, line_buffering=line_buffering)

def _exit_code(e):
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code & 0xFF
    print(e.code, file=sys.stderr)
    return 1

def _child(req):
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    for fd, path, flags in ((0, req["stdin"], os.O_RDONLY), (1, req["stdout"], os.O_WRONLY), (2, req["stderr"], os.O_WRONLY)):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    encoding, _, errors = (os.environ.get("PYTHONIOENCODING") or "").partition(":")
    encoding = encoding or sys.stdout.encoding
    errors = errors or (sys.stdout.errors if os.environ.get("PYTHONIOENCODING") == START_IOENCODING else "strict")
    sys.stdin = sys.__stdin__ = _stream(0, "r", encoding, errors, False)
    sys.stdout = sys.__stdout__ = _stream(1, "w", encoding, errors, False)
    sys.stderr = sys.__stderr__ = _stream(2, "w", encoding, "backslashreplace", True)
    import tempfile
    tempfile.tempdir = None
    args = req["args"]
    if args[0] == "-c":
        source, filename, sys.argv, sys.path[0] = args[1], "<string>", ["-c", *args[2:]], ""
    else:
        filename = os.path.abspath(args[0])
        with open(filename, "rb") as f:
            source = f.read()
        sys.argv, sys.path[0] = list(args), os.path.dirname(filename)
    pythonpath = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[1:1 + len(START_PYTHONPATH)] = pythonpath     # as the interpreter puts $PYTHONPATH after the script's folder
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    if args[0] != "-c":
        main.__file__ = filename
    sys.modules["__main__"] = main
    try:
        exec(compile(source, filename, "exec"), main.__dict__)
        code = 0
    except SystemExit as e:
        code = _exit_code(e)
    except BaseException:
        kind, value, tb = sys.exc_info()
        value.__traceback__ = tb.tb_next                # from the script's first frame, as python prints it
        sys.excepthook(kind, value, tb.tb_next)
        code = 1
    try:                                           # as the interpreter ends: threads, atexit, then the streams
        threading._shutdown()
        atexit._run_exitfuncs()
    except SystemExit as e:
        code = _exit_code(e)
    except BaseException:
        sys.excepthook(*sys.exc_info())
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            code = code or 120
    os._exit(code)

START_IOENCODING = os.environ.get("PYTHONIOENCODING")
START_PYTHONPATH = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
requests, replies = sys.stdin.buffer, sys.stdout.buffer
replies.write(b"ready\n")
replies.flush()
for line in requests:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        try:
            _child(req)
        finally:
            os._exit(1)
    replies.write(b"pid %d\n" % pid)
    replies.flush()
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    replies.write(b"rc %d\n" % code)
    replies.flush()
'''


class _Server:
    """One forking server per test process, started at the first run, with that moment's environment."""

    def __init__(self):
        self.env = dict(os.environ)
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=self.env, cwd=os.getcwd())
        self.lock = threading.Lock()
        if self._line(300) != [b"ready"]:                   # torch imported (slow on a loaded machine)
            self.close()
            raise RuntimeError("the test's fork server did not start")

    def needs_a_fresh_interpreter(self, args, env):
        if args[0].startswith("-") and args[0] != "-c":
            return True
        changed = {k for k in set(env) | set(self.env) if env.get(k) != self.env.get(k)}
        if "PYTHONPATH" in changed:                   # site imports sitecustomize at start-up: only a real start does
            folders = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
            if any(os.path.exists(os.path.join(p, name)) for p in folders for name in CUSTOMIZE):
                return True
        return any(STARTUP_ENV.match(k) for k in changed)

    def _line(self, timeout):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the test's fork server ended")
        return line.split()

    def run(self, args, env, cwd, input, timeout):
        with self.lock, tempfile.TemporaryDirectory(prefix="forkserver-") as tmp:
            paths = {name: os.path.join(tmp, name) for name in ("stdin", "stdout", "stderr")}
            data = input.encode("utf-8") if isinstance(input, str) else (input or b"")
            for name, content in (("stdin", data), ("stdout", b""), ("stderr", b"")):
                with open(paths[name], "wb") as f:
                    f.write(content)
            req = dict(args=list(args), env=dict(env), cwd=str(cwd), **paths)
            pid = None
            try:
                self.proc.stdin.write(json.dumps(req).encode("utf-8") + b"\n")
                self.proc.stdin.flush()
                pid = int(self._line(60)[1])
                reply = self._line(timeout)
            except BaseException:                  # e.g. the test's own time limit: end the run and this server
                self.close(pid)
                raise
            if reply is None:                                  # as subprocess.run: kill it, then raise
                self.close(pid)
                raise subprocess.TimeoutExpired([sys.executable, *args], timeout)
            out, err = (open(paths[n], "rb").read() for n in ("stdout", "stderr"))
            return int(reply[1]), out, err

    def close(self, pid=None):
        """Kill the run in progress (if any) and the server; the next run starts a new server."""
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.kill()
        self.proc.wait()


_server = None


@atexit.register
def end_server():
    """Let the server end on its own (end of its input) and wait for it: its CPU time and its children's
    then count in this process's (what `/usr/bin/time` shows for a test run)."""
    global _server
    if _server is not None and _server.proc.poll() is None:
        _server.proc.stdin.close()
        try:
            _server.proc.wait(30)
        except subprocess.TimeoutExpired:
            _server.close()
    _server = None


def _text(data):
    """Bytes as subprocess.run(text=True, encoding="utf-8") gives them: universal newlines."""
    return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")


def python(args, env=None, cwd=None, input=None, timeout=120, text=True):
    """subprocess.run([sys.executable, *args], capture_output=True, ...) through the fork server."""
    global _server
    args = [str(a) for a in args]
    env = dict(os.environ if env is None else env)
    cwd = os.getcwd() if cwd is None else cwd
    if _server is None or _server.proc.poll() is not None:
        _server = _Server()
    if _server.needs_a_fresh_interpreter(args, env):
        return subprocess.run([sys.executable, *args], cwd=cwd, env=env, input=input, capture_output=True,
                              timeout=timeout, **(dict(text=True, encoding="utf-8") if text else {}))
    code, out, err = _server.run(args, env, cwd, input, timeout)
    if text:
        out, err = _text(out), _text(err)
    return subprocess.CompletedProcess([sys.executable, *args], code, out, err)
