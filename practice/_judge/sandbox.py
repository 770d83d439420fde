"""The sandbox, from the judge's side: each grading runs in a fresh Python process.

    Linux      judge ── starts once ──> python -m practice._judge.runner --server (clean environment)
                                          └── forks, per grading ──> the grading process
    elsewhere  judge ── starts, per grading ──> python -m practice._judge.runner (a new interpreter, clean environment)

Either way the grading process is new and holds what an interpreter started with an environment cleaned
of everything the judge holds (clean_env) and only its stdin and stdout pipes would: never the practice
page's token, a socket of the judge, the expected values (computed here, never sent) or the progress
file's path. It runs in a session of its own, says it is ready, reads its job and the inputs in one
frame, sets its limits (confine.py), runs the learner's functions and writes each result on its
stdout. The next grading's process is started as soon as this one is taken (`prestart`), so its
start-up overlaps the judge's own work.

The fork server (runner.fork_server) is such an interpreter that has imported torch and the runner once,
so a grading need not import them again: it holds its control socket, /dev/null and, per child not yet
ended, a pidfd and the pipe on which it tells the judge that child's pid and exit code (`Forked`). It
runs no learner code and no torch op, so it is single-threaded when it forks, and it ends when its
control socket closes with the judge. A server that died is started once more; then each grading
starts an interpreter, without a word.

Limits (what the solution adds, not what torch reserved at import: a CUDA build maps gigabytes of
address space it never touches):
  - memory: RLIMIT_AS = the address space when the job starts + the limit, per process; and the
    judge polls the process and everything below it, and ends them when their private resident
    memory beyond the process's own before the learner's code ran adds up to more than the limit;
  - processes: at most MAX_PROCESSES;
  - time: the judge waits at most the time limit for the results;
  - data: at most wire.MAX_RESULT per result, wire.MAX_TOTAL per grading, and a result's JSON within
    wire.MAX_HEADER bytes and wire.MAX_ITEMS containers, checked before it is decoded.
When the grading ends, the process and everything below it is killed (found in /proc from its pid: a
forked one is the server's child, not the judge's). Where a limit cannot be set
(no /proc, no RLIMIT_AS), the judge says so in one line and grades without it.
"""
import multiprocessing
import os
import queue
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from practice._judge import wire
from qwen.lang import T

MAX_PROCESSES = 64
POLL = 0.05                                        # seconds between watchdog checks
START_TIMEOUT = 120                                # a fresh interpreter importing torch on a busy laptop
BROKEN = 70                                        # the exit code when the process's own plumbing failed
TMP_PREFIX = "qwen-judge-"                         # + the judge's pid: a sandbox's working folder

JUDGE = Path(__file__).resolve().parent            # practice/_judge
ROOT = JUDGE.parents[1]

# What the sandbox's environment keeps of the judge's: what Python, torch and the system libraries need
# to start as they do here. Not kept: everything else (QWEN_PROGRESS, HF_TOKEN, SSH_AUTH_SOCK, D-Bus...).
KEEP = {"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TERM", "PYTHONPATH", "PYTHONHOME",
        "PYTHONUTF8", "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING", "VIRTUAL_ENV", "CONDA_PREFIX",
        "LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH", "SYSTEMROOT", "WINDIR", "COMSPEC", "PATHEXT", "TEMP", "TMP", "TMPDIR"}
KEEP_PREFIXES = ("LC_", "CUDA_", "OMP_", "MKL_", "KMP_", "MALLOC_")


def clean_env():
    env = {k: v for k, v in os.environ.items() if k in KEEP or k.startswith(KEEP_PREFIXES)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["OMP_NUM_THREADS"] = "1"                   # a solution computes on one thread, as the judge's cases assume
    return env


# ------------------------------------------------------------------------------------------ processes

def tree(root):
    """The pids of every living process below `root` (not root itself); None without /proc."""
    if not os.path.isdir("/proc/self"):
        return None
    parents = {}
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                rest = f.read().rsplit(b")", 1)[1].split()
            if rest[0] not in (b"Z", b"X"):                        # a zombie is dead
                parents[int(name)] = int(rest[1])
        except (OSError, ValueError, IndexError):
            continue
    below, grew = set(), {root}
    while grew:
        grew = {p for p, ppid in parents.items() if ppid in grew} - below
        below |= grew
    return below


def kill_tree(root, also=()):
    """SIGKILL every process below `root` (and the pids in `also`), until each one killed has died (a zombie
    has) and none is left below root (2 s at most)."""
    killed = set(also)
    for _ in range(40):
        killed |= tree(root) or set()
        left = {p for p in killed if _running(p)}
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def _running(pid):
    """Alive and not a zombie (where /proc says so)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return _alive(pid) and not os.path.isdir("/proc/self")


def private_memory(pid="self"):
    """Resident memory of a process that is not a file's pages (torch's libraries): bytes, 0 if unknown.
    A process forked from another holds its parent's pages too, so what it adds counts from there."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            fields = f.read().split()
        return (int(fields[1]) - int(fields[2])) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


# ------------------------------------------------------------------------------------------ the process

# Linux: a fork server forks each grading's process; elsewhere (macOS, Windows) each starts an interpreter
FORKS = sys.platform == "linux" and "forkserver" in multiprocessing.get_all_start_methods() and hasattr(os, "pidfd_open")
_server = None                                     # (Popen, control socket) of the fork server once started
_server_starts = 0                                 # a dead server is started again once, then interpreters


def _runner(*args, **pipes):
    flags = {"start_new_session": True} if os.name == "posix" else {
        "creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)}
    return subprocess.Popen([sys.executable, "-m", "practice._judge.runner", *args], env=clean_env(),
                            cwd=tempfile.gettempdir(), **pipes, **flags)


class Forked:
    """A grading process forked by the server, with what Process uses of a Popen. The server writes its
    pid, then its exit code, on a pipe of its own (the code BROKEN when the server is gone)."""

    def __init__(self, control, errors):
        (r0, w0), (r1, w1), (sr, sw) = os.pipe(), os.pipe(), os.pipe()
        self.stdin, self.stdout, self.status = open(w0, "wb"), open(r1, "rb"), open(sr, "rb", buffering=0)
        self.returncode = None
        try:                                        # a dead server: EPIPE, not SIGPIPE
            socket.send_fds(control, [b"f"], [r0, w1, errors.fileno(), sw], socket.MSG_NOSIGNAL)
        finally:
            for fd in (r0, w1, sw):
                os.close(fd)
        pid = self.status.read(4) if select.select([self.status], [], [], START_TIMEOUT)[0] else b""
        if len(pid) != 4:
            raise OSError("the fork server did not answer")
        self.pid = struct.unpack("i", pid)[0]

    def poll(self, timeout=0):
        if self.returncode is None and select.select([self.status], [], [], timeout)[0]:
            code = self.status.read(4)
            self.returncode = struct.unpack("i", code)[0] if len(code) == 4 else BROKEN
        return self.returncode

    def wait(self, timeout=None):
        if self.poll(timeout) is None:
            raise subprocess.TimeoutExpired("runner", timeout)
        return self.returncode

    def kill(self):
        if self.poll() is None:                     # a pid the server reaped may be another process's by now
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass


def _forked(errors):
    """A grading process forked by the server, started (again once) as needed; None where there is none."""
    global _server, _server_starts
    while FORKS:
        if _server is None or _server[0].poll() is not None:
            if _server_starts == 2:
                return None
            _server_starts += 1
            ours, its = socket.socketpair()
            try:
                _server = (_runner("--server", stdin=its.fileno(), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL), ours)
            except OSError:
                ours.close()
                _server = None
                continue
            finally:
                its.close()
        try:
            return Forked(_server[1], errors)
        except OSError:                             # it died, or does not answer: it is ended, then started again
            _server[0].kill()
            _server[0].wait()
            _server[1].close()
            _server = None
    return None


class Process:
    """One grading's `python -m practice._judge.runner` (forked by the server, or a fresh interpreter), and a
    thread that turns what it writes into events: (header, blobs) frames, "garbled" when it wrote
    something that is not frames, None at its end."""

    def __init__(self):
        self.errors = tempfile.TemporaryFile()
        self.proc = _forked(self.errors) or _runner(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors)
        self.events = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        reader = wire.Reader(max_frame=wire.MAX_RESULT + (1 << 20), limit_header=True)
        try:
            while data := self.proc.stdout.read1(1 << 20):
                for frame in reader.feed(data):
                    self.events.put(frame)
        except ValueError:                          # not frames: the learner's code wrote there itself
            self.events.put("garbled")
        except OSError:
            pass
        self.events.put(None)

    def next(self, timeout):
        try:
            return self.events.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return ()

    def last_error(self):
        try:
            self.errors.seek(0)
            return (self.errors.read().decode("utf-8", "replace").strip().splitlines() or ["?"])[-1]
        except (OSError, ValueError):
            return "?"

    def stop(self):
        if os.name == "posix":
            try:                                    # its session's group at once: nothing left in it forks a
                os.killpg(self.proc.pid, signal.SIGKILL)   # child the walk below would miss
            except OSError:
                pass
            kill_tree(self.proc.pid, also=[self.proc.pid])
        try:
            self.proc.kill()
            self.proc.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            pass


AHEAD = 2                                          # processes started ahead: a fresh interpreter imports torch for
_lock = threading.Lock()                           # seconds, and two do so at once while the judge grades
_ahead = []                                        # the next gradings' processes, oldest first
_swept = False


def sweep():
    """Remove the working folders that judges which did not end cleanly (kill -9) left behind."""
    root = tempfile.gettempdir()
    for name in os.listdir(root):
        m = re.fullmatch(re.escape(TMP_PREFIX) + r"(\d+)-\w+", name)
        if m and int(m.group(1)) != os.getpid() and not _alive(int(m.group(1))):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def prestart(n=1):
    """Have n processes started ahead, so the next gradings need not wait for their interpreter and torch."""
    global _swept
    with _lock:
        if not _swept:
            _swept = True
            sweep()
        _ahead[:] = [p for p in _ahead if p.proc.poll() is None]
        while len(_ahead) < n:
            _ahead.append(Process())


def _take():
    """A process for one grading (the oldest started ahead); the next ones start at once."""
    prestart()
    with _lock:
        process = _ahead.pop(0)
    prestart(AHEAD)
    return process


# ------------------------------------------------------------------------------------------ one grading

class Sandbox:
    """One grading: send() the job and the inputs; collect() the frames; close()."""

    def __init__(self, job, memory, time_limit):
        self.job, self.memory, self.time_limit = job, memory, time_limit
        self.process = None
        self.ready = False
        self.base = None                            # the process's private memory before the learner's code ran
        self.verdict = None                         # (kind, message) when the judge ended it
        self.status = None                          # the process's return code
        self.received = 0                           # bytes of results so far (wire.MAX_TOTAL)
        self.tmp = tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-")   # its working folder, removed at the end

    def send(self, header, blobs):
        """Give the process its job and the inputs. False when it could not (then ending() says why)."""
        self.process = _take()
        event = self.process.next(START_TIMEOUT)
        self.ready = isinstance(event, tuple) and event[0].get("kind") == "ready"
        if not self.ready:
            return False
        try:
            self.process.proc.stdin.write(wire.pack({**header, **self.job, "memory": self.memory, "folder": self.tmp},
                                                    blobs))
            self.process.proc.stdin.flush()
            return True
        except (OSError, ValueError):
            return False

    def collect(self, on_frame):
        """Read the frames until on_frame(header, blobs) returns True (its last), the process's end, the
        time limit, or a limit broken."""
        deadline = time.monotonic() + self.time_limit
        next_check = time.monotonic() + POLL
        while True:
            now = time.monotonic()
            if now >= deadline:
                self.verdict = ("timeout", T("did not finish within {s:g} s (an endless loop?)", "{s:g} 秒内没有结束（死循环？）",
                                             s=self.time_limit))
                return
            event = self.process.next(min(POLL, deadline - now))
            if event is None:
                self.status = self.process.proc.wait()
                return
            if event == "garbled":
                return self._garbled()
            if event:
                header, frame_blobs = event
                self.received += sum(map(len, frame_blobs))
                if self.received > wire.MAX_TOTAL:
                    self.verdict = ("data", T("sent back more than {m:.0f} MB of results in all",
                                              "传回的结果总共超过了 {m:.0f} MB", m=wire.MAX_TOTAL / 2**20))
                    return
                if self.base is None:               # the first frame, written before the learner's code runs
                    self.base = header.get("base") if type(header.get("base")) is int else 0
                try:                                # a frame the learner's code wrote itself can be anything
                    if on_frame(header, frame_blobs):
                        return
                except ValueError:
                    return self._garbled()
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + POLL
                if self._over_limits():
                    return

    def _garbled(self):
        self.verdict = ("garbled", T("the judge could not read what your code sent back (did it write to the judge's "
                                     "pipe?)", "评测器读不懂你的代码传回的数据（它是否写了评测器的管道？）"))

    def _over_limits(self):
        pid = self.process.proc.pid
        below = tree(pid)
        if below is None:
            return False
        added = sum(max(0, private_memory(p) - (self.base or 0)) for p in below | {pid})
        if len(below) + 1 > MAX_PROCESSES:
            self.verdict = ("processes", T("your code started more than {n} processes", "你的代码启动了超过 {n} 个进程",
                                           n=MAX_PROCESSES))
        elif self.base is not None and added > self.memory:
            self.verdict = ("memory", T("used more than the {gb:g} GB of memory allowed (with the processes it started)",
                                        "使用的内存超过了允许的 {gb:g} GB（包括它启动的进程）", gb=round(self.memory / 2**30, 2)))
        else:
            return False
        self.kill()
        return True

    def kill(self):
        """End the process and every process it started."""
        if self.process is not None:
            self.process.stop()

    def close(self):
        try:
            self.kill()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def ending(self):
        """How the process ended when it did not say `done`: (kind, message)."""
        if self.verdict:
            return self.verdict
        if not self.ready:
            last = self.process.last_error() if self.process is not None else "?"
            return ("crash", T("the grading process did not start: {m}", "评测进程没有启动：{m}", m=last))
        code = self.status
        if code is None or code == BROKEN:
            return ("crash", T("your code's process stopped without a result (did it close the judge's pipe or its "
                               "file descriptors?)", "你的代码所在的进程没有给出结果就停止了（它是否关闭了与评测器的管道或文件描述符？）"))
        if code < 0:
            n = -code
            name = signal.Signals(n).name if n in signal.Signals._value2member_map_ else str(n)
            why = T("; out of memory?", "；内存不够？") if n == signal.SIGKILL else ""
            return ("killed", T("your code was killed by signal {n} ({s}{w})", "你的代码被信号 {n}（{s}{w}）终止",
                                n=n, s=name, w=why))
        return ("exit", T("your code ended the process (os._exit({c})): return a value instead",
                          "你的代码结束了进程（os._exit({c})）：请返回一个值", c=code))
