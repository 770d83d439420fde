"""The sandbox, from the judge's side: a fresh Python process runs the learner's functions.

    judge ── starts ──> server (python -m practice._judge.runner, in a clean environment)
                          └── fork, per grading ──> child: confines itself, runs the learner's code

The server is a new interpreter, started with an environment cleaned of everything the judge holds
(clean_env), so neither it nor a child forked from it ever holds the practice page's token, a socket
of the judge, the expected values (computed here, never sent) or the progress file's path. It imports
torch once, then forks one child per grading, so a grading costs a fork, not an interpreter. The
child confines itself before the learner's code runs (confine.py) and writes its results on a pipe
of its own; the server relays them, tagged with the grading's number, and reports the child's pid
and its exit status on a line the child does not hold.

Limits (what the solution adds, not what torch reserved at import: a CUDA build maps gigabytes of
address space it never touches):
  - memory: RLIMIT_AS = the child's address space when it starts + the limit, per process; and the
    judge polls every process below the server and ends them when their resident memory beyond the
    child's starting size adds up to more than the limit;
  - processes: at most MAX_PROCESSES;
  - time: the judge waits at most the time limit for the results;
  - data: at most wire.MAX_RESULT per result, wire.MAX_TOTAL per grading, and a result's JSON within
    wire.MAX_HEADER bytes and wire.MAX_ITEMS containers, checked before it is decoded.
When the grading ends, every process below the server is killed. Where a limit cannot be set (no /proc,
no RLIMIT_AS), the judge says so in one line and grades without it.

Where fork is not used (not Linux), the server runs one grading in itself and the next is started at
once (`prestart`), so its start-up overlaps the judge's own work.
"""
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from practice._judge import wire

FORK = sys.platform.startswith("linux") and hasattr(os, "fork")
MAX_PROCESSES = 64
POLL = 0.05                                        # seconds between watchdog checks
START_TIMEOUT = 120                                # a fresh interpreter importing torch on a busy laptop
BROKEN = 70                                        # a child's exit code when its own plumbing failed (runner.BROKEN)

JUDGE = Path(__file__).resolve().parent            # practice/_judge
ROOT = JUDGE.parents[1]

# What the server's environment keeps of the judge's: what Python, torch and the system libraries need
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

def _procs():
    """{pid: (ppid, rss bytes)} of the living processes; None without /proc."""
    if not os.path.isdir("/proc/self"):
        return None
    page, procs = os.sysconf("SC_PAGE_SIZE"), {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read()
            rest = raw[raw.rindex(b")") + 2:].split()
            if rest[0] not in (b"Z", b"X"):                    # a zombie is dead
                procs[int(name)] = (int(rest[1]), int(rest[21]) * page)
        except (OSError, ValueError, IndexError):
            continue
    return procs


def tree(root, procs=None):
    """{pid: rss} of every process below `root` (not root itself); None without /proc."""
    procs = _procs() if procs is None else procs
    if procs is None:
        return None
    below, grew = set(), {root}
    while grew:
        grew = {p for p, (ppid, _) in procs.items() if ppid in grew} - below
        below |= grew
    return {p: procs[p][1] for p in below}


def kill_tree(root, also=()):
    """SIGKILL every process below `root` (and the pids in `also`), until none runs (2 s at most)."""
    for _ in range(40):
        left = set(tree(root) or ()) | {p for p in also if _alive(p)}
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


def _rss(pid):
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


# ------------------------------------------------------------------------------------------ the server

class Server:
    """One running `python -m practice._judge.runner`, and a thread that turns what it writes into events:
    (header, blobs) frames, or None when its output ended."""

    def __init__(self):
        self.errors = tempfile.TemporaryFile()
        self.fork = FORK                            # else it runs one grading in itself
        args = [sys.executable, "-m", "practice._judge.runner"] + ([] if self.fork else ["--one-shot"])
        flags = {"start_new_session": True} if os.name == "posix" else {
            "creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)}
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors,
                                     env=clean_env(), cwd=tempfile.gettempdir(), **flags)
        self.events = queue.Queue()
        self.ready = False
        self.broken = False                         # garbled, or left in a state the next grading cannot trust
        self.n = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        reader = wire.Reader(max_frame=wire.MAX_RESULT + (2 << 20))
        try:
            while True:
                data = self.proc.stdout.read1(1 << 20)
                if not data:
                    break
                for frame in reader.feed(data):
                    self.events.put(frame)
        except (OSError, ValueError):
            pass
        self.events.put(None)

    def usable(self):
        return not self.broken and self.proc.poll() is None

    def wait_ready(self):
        """True once the server said it is ready (it imports torch first); False when it ended instead."""
        end = time.monotonic() + START_TIMEOUT
        while not self.ready:
            try:
                event = self.events.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                return False
            if event is None:
                return False
            self.ready = event[0].get("kind") == "ready"
        return True

    def write(self, data):
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
            return True
        except (OSError, ValueError):
            return False

    def last_error(self):
        try:
            self.errors.seek(0)
            return (self.errors.read().decode("utf-8", "replace").strip().splitlines() or [""])[-1]
        except (OSError, ValueError):
            return ""

    def stop(self):
        self.broken = True
        if os.name == "posix":
            kill_tree(self.proc.pid, also=[self.proc.pid])
        try:
            self.proc.kill()
            self.proc.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            pass


_lock = threading.Lock()
_server = None
TMP_PREFIX = "qwen-judge-"                         # + the judge's pid: a sandbox's working folder
_swept = False


def sweep():
    """Remove the working folders that judges which did not end cleanly (kill -9) left behind."""
    import re
    import shutil
    root = tempfile.gettempdir()
    for name in os.listdir(root):
        m = re.fullmatch(re.escape(TMP_PREFIX) + r"(\d+)-\w+", name)
        if m and int(m.group(1)) != os.getpid() and not _alive(int(m.group(1))):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def prestart():
    """Start the server now, so the first grading need not wait for its interpreter and torch."""
    global _server, _swept
    with _lock:
        if not _swept:
            _swept = True
            sweep()
        if _server is None or not _server.usable():
            _server = Server()


def _take():
    """A server for one grading; where each serves one, the next is started at once."""
    global _server
    prestart()
    with _lock:
        server = _server
        if not server.fork:
            _server = Server()
    return server


# ------------------------------------------------------------------------------------------ one grading

class Sandbox:
    """One grading: send() the job and the inputs (the child starts); collect() the frames; close()."""

    def __init__(self, job, memory, time_limit):
        self.job, self.memory, self.time_limit = job, memory, time_limit
        self.server = self.pid = None
        self.base_rss = 0
        self.verdict = None                         # (kind, message) when the judge ended it
        self.status = None                          # the child's wait status (one-shot: the process's return code)
        self.server_gone = False
        self.received = 0                           # bytes of results so far (wire.MAX_TOTAL)
        self.tmp = tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-")   # its working folder, the only one it may write in

    def writable(self):
        extra = [p for p in os.environ.get("QWEN_JUDGE_WRITABLE", "").split(os.pathsep) if p.strip()]
        return [self.tmp] + extra

    def send(self, header, blobs):
        """Start the child with the inputs. False when it could not start (then ending() says why)."""
        self.server = _take()
        if not self.server.wait_ready():
            self.server.stop()
            return False
        self.server.n += 1
        self.n = self.server.n
        job = {**self.job, "n": self.n, "memory": self.memory, "writable": self.writable()}
        if not (self.server.write(wire.pack(job, [])) and self.server.write(wire.pack(header, blobs))):
            self.server_gone = True
            return False
        event = self._next(10.0, want="child")
        if event is None:
            return False
        self.pid = event[0].get("pid") if type(event[0].get("pid")) is int else None
        self.base_rss = _rss(self.pid) if self.pid else 0
        return self.pid is not None

    def _next(self, timeout, want=None):
        """The next event of this grading (frames tagged with another grading's number are passed over);
        None at the timeout or when the server's output ended (server_gone)."""
        end = time.monotonic() + timeout
        while True:
            try:
                event = self.server.events.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                return None
            if event is None:
                self.server_gone = True
                self.server.events.put(None)          # the end stays the end for whoever reads next
                return None
            header = event[0]
            if header.get("n") == self.n and (want is None or header.get("kind") == want):
                return event

    def collect(self, on_frame):
        """Read the child's frames until on_frame(header, blobs) returns True (its last), the child's end,
        the time limit, or a limit broken."""
        from qwen.lang import T
        deadline = time.monotonic() + self.time_limit
        next_check = time.monotonic() + POLL
        while True:
            now = time.monotonic()
            if now >= deadline:
                self.verdict = ("timeout", T("did not finish within {s:g} s (an endless loop?)", "{s:g} 秒内没有结束（死循环？）",
                                             s=self.time_limit))
                return
            event = self._next(min(POLL, deadline - now))
            if self.server_gone:
                if not self.server.fork:                # one-shot: the process was the child
                    self.status = self.server.proc.wait()
                return
            if event is not None:
                header, blobs = event
                kind = header.get("kind")
                if kind == "exit":
                    self.status = header.get("status") if type(header.get("status")) is int else 0
                    return
                if kind == "garbled":
                    return self._garbled()
                if kind == "out" and len(blobs) == 1:
                    self.received += len(blobs[0])
                    if self.received > wire.MAX_TOTAL:
                        self.verdict = ("data", T("sent back more than {m:.0f} MB of results in all",
                                                  "传回的结果总共超过了 {m:.0f} MB", m=wire.MAX_TOTAL / 2**20))
                        return
                    try:                                # a frame the child wrote itself can be anything
                        if on_frame(*wire.parse(blobs[0], max_header=wire.MAX_HEADER)):
                            return
                    except ValueError:
                        return self._garbled()
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + POLL
                if self._over_limits():
                    return

    def _garbled(self):
        from qwen.lang import T
        self.verdict = ("garbled", T("the judge could not read what your code sent back (did it write to the judge's "
                                     "pipe?)", "评测器读不懂你的代码传回的数据（它是否写了评测器的管道？）"))

    def _members(self):
        """{pid: rss} of the grading's processes: everything below the server (one-shot: and the server)."""
        root = self.server.proc.pid
        procs = _procs()
        if procs is None:
            return None
        below = tree(root, procs)
        if not self.server.fork and root in procs:
            below[root] = procs[root][1]
        return below

    def _over_limits(self):
        from qwen.lang import T
        group = self._members()
        if not group:
            return False
        if len(group) > MAX_PROCESSES:
            self.verdict = ("processes", T("your code started more than {n} processes", "你的代码启动了超过 {n} 个进程",
                                           n=MAX_PROCESSES))
            self.kill()
            return True
        added = sum(max(0, rss - self.base_rss) for rss in group.values())
        if added > self.memory:
            self.verdict = ("memory", T("used more than the {gb:g} GB of memory allowed (with the processes it started)",
                                        "使用的内存超过了允许的 {gb:g} GB（包括它启动的进程）", gb=round(self.memory / 2**30, 2)))
            self.kill()
            return True
        return False

    def kill(self):
        """End the child and every process it started."""
        if self.server is None:
            return
        if not self.server.fork:
            self.server.stop()
        elif os.name == "posix":
            kill_tree(self.server.proc.pid)

    def close(self):
        """Everything of this grading ends; a server that cannot be trusted with the next is replaced."""
        try:
            if self.server is not None and self.pid is not None and self.server.fork:
                self.kill()
                if self.status is None and not self.server_gone and self._next(5.0, want="exit") is None:
                    self.server.broken = True             # its child's end never came: start afresh
                if self.verdict and self.verdict[0] == "garbled":
                    self.server.broken = True
                if self.server.broken:
                    self.server.stop()
            elif self.server is not None and not self.server.fork:
                self.server.stop()
        finally:
            import shutil
            shutil.rmtree(self.tmp, ignore_errors=True)

    def ending(self):
        """How the child ended when it did not say `done`: (kind, message)."""
        from qwen.lang import T
        if self.verdict:
            return self.verdict
        if self.pid is None:
            last = self.server.last_error() if self.server is not None else ""
            return ("crash", T("the grading process did not start: {m}", "评测进程没有启动：{m}", m=last or "?"))
        if self.server_gone and self.server.fork:
            return ("guard", T("your code ended the judge's helper process (it killed its parent process): that stops the "
                               "grading", "你的代码结束了评测器的辅助进程（它杀死了父进程）：评测因此中止"))
        how = _how(self.status, self.server.fork)
        if how is None:
            return ("crash", T("your code's process stopped without a result", "你的代码所在的进程没有给出结果就停止了"))
        if how[0] == "signal":
            n = how[1]
            name = signal.Signals(n).name if n in signal.Signals._value2member_map_ else str(n)
            if n == signal.SIGKILL:
                return ("killed", T("your code was killed by signal {n} ({s}; out of memory?)",
                                    "你的代码被信号 {n}（{s}）终止（内存不够？）", n=n, s=name))
            return ("killed", T("your code was killed by signal {n} ({s})", "你的代码被信号 {n}（{s}）终止", n=n, s=name))
        if how[1] == BROKEN:
            return ("crash", T("your code's process stopped without a result (did it close the judge's pipe or its "
                               "file descriptors?)", "你的代码所在的进程没有给出结果就停止了（它是否关闭了与评测器的管道或文件描述符？）"))
        return ("exit", T("your code ended the process (os._exit({c})): return a value instead",
                          "你的代码结束了进程（os._exit({c})）：请返回一个值", c=how[1]))


def _how(status, fork):
    """("signal", n) or ("exit", code) from a wait status (fork) or a return code (one-shot), or None."""
    if status is None:
        return None
    if not fork:
        return ("signal", -status) if status < 0 else ("exit", status)
    if os.WIFSIGNALED(status):
        return "signal", os.WTERMSIG(status)
    return "exit", os.WEXITSTATUS(status) if os.WIFEXITED(status) else status


# ------------------------------------------------------------------------------------------ the judge's files

def judge_files():
    """The files whose code decides a grading or records it: practice/judge.py, practice/_judge/ and qwen/
    (the expected values come from there). The judge fingerprints them around every grading."""
    files = [ROOT / "practice" / "judge.py", ROOT / "practice" / "__init__.py"]
    for folder in (JUDGE, ROOT / "qwen"):
        files += sorted(folder.rglob("*.py"))
    return files


def fingerprint(files=None):
    """{path: sha256 of its bytes, or None when unreadable} for the judge's files."""
    import hashlib
    out = {}
    for f in judge_files() if files is None else files:
        try:
            out[str(f)] = hashlib.sha256(f.read_bytes()).hexdigest()
        except OSError:
            out[str(f)] = None
    return out
