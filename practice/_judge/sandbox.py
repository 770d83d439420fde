"""The sandbox: a forked process that runs the learner's functions, with a time and a memory limit.

    judge (or notebook kernel) ── fork ──> guard ── fork ──> sandbox (own session: setsid)

The sandbox is forked before the judge computes any expected value, so they are not in its
memory. It receives the inputs and sends back plain data over a socket (wire.py). The guard only
waits for it and reports its pid and exit status, so a solution that kills its parent
(`os.kill(os.getppid(), 9)`) kills the guard, not the judge, and gets a one-line verdict.

Limits (what the solution adds, not what torch reserved at import: a CUDA build maps gigabytes
of address space it never touches):
  - memory: RLIMIT_AS = the sandbox's address space when it starts + the limit, per process; and
    the judge polls the whole session (the sandbox and every process it starts) and ends it when
    their resident memory beyond the sandbox's starting size adds up to more than the limit;
  - processes: at most MAX_PROCESSES in the session;
  - time: the judge waits at most the time limit for the results.
When the grading ends the whole session is killed, stray threads and children included. Where a
limit cannot be set (no /proc, no RLIMIT_AS), the judge says so in one line and grades without it.

What the learner's code can reach from here (README, "What the sandbox prevents"):
  - seal(): the judge's modules leave sys.modules and cannot be imported again; QWEN_PROGRESS is
    not in the environment;
  - landlock(): on Linux with Landlock, file writes only in the sandbox's own temporary folder
    (plus $QWEN_JUDGE_WRITABLE), and no ptrace or /proc/<pid>/mem of processes outside it, root
    included; elsewhere nothing stops a write, and fingerprint() around the grading catches a
    changed judge file. Files stay readable, and a forked sandbox holds the judge's code.
"""
import io
import os
import select
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

from practice._judge import wire

MAX_PROCESSES = 64
BROKEN = 70                                        # the sandbox's exit code when its own plumbing failed
POLL = 0.05                                        # seconds between watchdog checks


def available():
    """Fork is used where it is safe with torch imported (Linux, WSL); elsewhere (Windows, macOS, or
    QWEN_JUDGE_SPAWN=1) the sandbox is a fresh Python process: Spawned."""
    return (hasattr(os, "fork") and hasattr(os, "setsid") and sys.platform.startswith("linux")
            and os.environ.get("QWEN_JUDGE_SPAWN", "") in ("", "0"))


def _statm(pid):
    """(address space, resident) in bytes from /proc, or None."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            size, rss = f.read().split()[:2]
        page = os.sysconf("SC_PAGE_SIZE")
        return int(size) * page, int(rss) * page
    except (OSError, ValueError, IndexError):
        return None


def set_limits(extra):
    """Cap this process's address space at its current size + extra. Returns None, or a one-line note."""
    from qwen.lang import T
    try:
        import resource
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):
        return T("no memory limit on this system (no resource module): graded without one",
                 "这个系统上没有内存限制（没有 resource 模块）：不设内存限制地评测")
    now = _statm("self")
    if now is None:
        return T("the memory limit needs /proc (Linux): graded without it", "内存限制需要 /proc（Linux）：不设内存限制地评测")
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        want = now[0] + extra
        if hard != resource.RLIM_INFINITY and want > hard:
            want = hard
        resource.setrlimit(resource.RLIMIT_AS, (want, hard))
    except (ValueError, OSError) as e:
        return T("could not set the memory limit ({e}): graded without it", "无法设置内存限制（{e}）：不设内存限制地评测", e=e)
    return None


JUDGE = Path(__file__).resolve().parent            # practice/_judge
ROOT = JUDGE.parents[1]


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


# Landlock (Linux 5.13+, no root needed, and it binds root too): the rights on files the sandbox gives up.
_LL_WRITE = (1 << 1) | (1 << 4) | (1 << 5) | sum(1 << b for b in range(6, 13))   # write, remove, make *
_LL_REFER, _LL_TRUNCATE = 1 << 13, 1 << 14                                         # ABI 2, ABI 3
_LL_TCP = (1 << 0) | (1 << 1)                                                      # ABI 4: bind, connect (no rule: none)
_SYS_CREATE, _SYS_ADD, _SYS_RESTRICT = 444, 445, 446                               # the same on every architecture


def landlock_abi():
    """The kernel's Landlock ABI version: 0 where there is none (not Linux, an old kernel, disabled)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        return max(0, libc.syscall(_SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))
    except (OSError, AttributeError, ValueError):
        return 0


def landlock(writable):
    """In the sandbox: from now on this process and its children may write, create or delete files only
    beneath the folders in `writable` and /dev/shm (and open devices such as /dev/null or a GPU for
    writing), and may not read another process's
    memory or environment through /proc or ptrace (Landlock scopes ptrace to the sandbox itself), nor
    (ABI 4, Linux 6.7+) connect or bind a TCP socket: a solution that found the practice page's token in
    its memory cannot ask that server (which writes the learner's files) for anything.
    Returns True when the kernel applied it; False where Landlock is absent (not Linux, an old kernel,
    disabled), and the sandbox then runs without it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes
        import struct
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        abi = libc.syscall(_SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))   # the ABI version
        if abi < 1:
            return False
        handled = _LL_WRITE | (_LL_REFER if abi >= 2 else 0) | (_LL_TRUNCATE if abi >= 3 else 0)
        # ABI 4: no TCP connection either; the practice page's server (--web) would write files for it
        attr = ctypes.create_string_buffer(struct.pack("<QQ", handled, _LL_TCP if abi >= 4 else 0))
        ruleset = libc.syscall(_SYS_CREATE, attr, ctypes.c_size_t(16 if abi >= 4 else 8), ctypes.c_uint32(0))
        if ruleset < 0:
            return False
        try:
            device = (1 << 1) | (_LL_TRUNCATE if abi >= 3 else 0)          # open devices for writing (/dev/null, a GPU)
            rules = [(str(d), handled) for d in writable] + [("/dev", device), ("/dev/shm", handled)]
            for where, allowed in rules:
                try:
                    fd = os.open(where, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue
                try:
                    rule = ctypes.create_string_buffer(struct.pack("<Qi", allowed, fd))
                    libc.syscall(_SYS_ADD, ctypes.c_int(ruleset), ctypes.c_int(1), rule, ctypes.c_uint32(0))
                finally:
                    os.close(fd)
            if libc.prctl(38, 1, 0, 0, 0) != 0:                    # PR_SET_NO_NEW_PRIVS, required first
                return False
            return libc.syscall(_SYS_RESTRICT, ctypes.c_int(ruleset), ctypes.c_uint32(0)) == 0
        finally:
            os.close(ruleset)
    except (OSError, AttributeError, ValueError):
        return False


class _NoJudgeImports:
    """A meta path finder, first in the sandbox's sys.meta_path: importing a module that lives in
    practice/_judge/ (the references, the cases, the comparison) or practice/judge.py raises ImportError."""

    def __init__(self, roots):
        self.roots = [os.path.realpath(r) for r in roots]

    def _inside(self, where):
        where = os.path.realpath(where)
        return any(where == r or where.startswith(r + os.sep) for r in self.roots)

    def find_spec(self, name, path=None, target=None):
        import importlib.machinery
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        places = [spec.origin] + list(spec.submodule_search_locations or []) if spec is not None else []
        if any(p and self._inside(p) for p in places):
            from qwen.lang import T
            raise ImportError(T("{n} is part of the judge: the sandbox does not import it",
                                "{n} 是评测器的一部分：沙箱里不能导入它", n=name), name=name)
        return None

    def invalidate_caches(self):
        pass


def is_judge_file(file):
    """True for a file inside practice/_judge (a reference, an equivalent form, a known mistake)."""
    return _NoJudgeImports([JUDGE])._inside(str(file))


def seal():
    """In the sandbox, just before the learner's code runs: the judge's own modules leave sys.modules
    (and the `practice` package's attributes), and a finder refuses to import them again. The code
    already running here keeps its references; the learner's code finds no name to import."""
    roots = [JUDGE, ROOT / "practice" / "judge.py"]
    finder = _NoJudgeImports(roots)
    for name, module in list(sys.modules.items()):
        where = getattr(module, "__file__", None)
        if name == "practice.judge" or name.startswith("practice._judge") or (where and finder._inside(where)):
            del sys.modules[name]
    package = sys.modules.get("practice")
    for attr in ("_judge", "judge"):
        if package is not None and hasattr(package, attr):
            delattr(package, attr)
    import types
    sys.modules["__main__"] = types.ModuleType("__main__")         # judge.py run as a script was __main__
    sys.meta_path.insert(0, finder)


def enter(memory, writable=()):
    """In the sandbox, before any learner code: output captured (prints, C-level output, stray
    threads), no stdin, progress not writable (nor its path in the environment), file writes only in
    `writable` (Landlock, where the kernel has it), limits set. Returns (capture file, note or None)."""
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    capture = tempfile.TemporaryFile()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(capture.fileno(), 1)
    os.dup2(capture.fileno(), 2)
    sys.stdin = open(0, encoding="utf-8", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)
    from practice._judge import progress
    progress.disable()
    if writable:                                                    # temporary files go to the sandbox's own folder
        os.environ["TMPDIR"] = tempfile.tempdir = str(writable[0])
    landlock(writable)
    return capture, set_limits(memory)


def close_sockets(keep):
    """In a forked sandbox: every socket it inherited but its own line to the judge becomes /dev/null. A
    fork copies every descriptor: under --web, the server's listening socket and its connections to the
    browser, which the learner's code could accept on or answer in the server's place. The numbers stay
    taken (not closed), so a socket object of the judge's finalized here closes no file of the sandbox."""
    import stat
    if not os.path.isdir("/proc/self/fd"):
        return
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            try:
                if fd not in (keep, null) and stat.S_ISSOCK(os.fstat(fd).st_mode):
                    os.dup2(null, fd, inheritable=False)
            except OSError:                                         # the listing's own descriptor, already closed
                pass
    finally:
        os.close(null)


def use_fork(notebook=False):
    """Fork the sandbox from this process? Not where fork is unsafe or absent, and not from a notebook
    whose process already started CUDA (a forked child cannot use CUDA then): Spawned instead."""
    if not available():
        return False
    torch = sys.modules.get("torch")
    return not (notebook and torch is not None and torch.cuda.is_initialized())


def become_subreaper():
    """In the guard (Linux): processes the sandbox starts and orphans (double fork, setsid) are
    re-parented to the guard instead of init, so the judge still finds them as its descendants."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)   # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def _linger(r_alive):
    """In the guard, after the sandbox ended: stay (reaping orphans) until the judge has ended them and
    the guard with them, or the judge is gone (EOF), so no orphan is re-parented out of reach."""
    while True:
        ready, _, _ = select.select([r_alive], [], [], 0.5)
        if ready and not os.read(r_alive, 1):
            return
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass


class Sandbox:
    """One sandboxed run: start() forks; send() the inputs; collect() the frames and the verdict."""

    def __init__(self, child_main, memory, time_limit):
        self.child_main = child_main               # fn(sock, capture_file, note) in the sandbox
        self.memory = memory
        self.time_limit = time_limit
        self.gpid = self.spid = None
        self.members = set()
        self.base_rss = 0
        self.verdict = None                         # (kind, message) when the judge ended it
        self.status = None                          # the sandbox's wait status, from the guard
        self.guard_died = False
        self.note = None
        self.tmp = None                             # the only folder the sandbox may write in (Landlock)

    def _make_tmp(self):
        """The sandbox's own temporary folder, then the folders in $QWEN_JUDGE_WRITABLE: where it may write."""
        self.tmp = tempfile.mkdtemp(prefix="qwen-judge-sandbox-")
        extra = [p for p in os.environ.get("QWEN_JUDGE_WRITABLE", "").split(os.pathsep) if p.strip()]
        self.writable = [self.tmp] + extra
        return self.writable

    def _remove_tmp(self):
        if self.tmp:
            import shutil
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    # ------------------------------------------------------------------ the forked side

    def start(self):
        sys.stdout.flush()
        sys.stderr.flush()
        self._make_tmp()
        parent, child = socket.socketpair()
        r_st, w_st = os.pipe()
        r_alive, w_alive = os.pipe()                               # EOF for the guard when the judge is gone
        gpid = os.fork()
        if gpid == 0:                                              # the guard
            try:
                parent.close()
                os.close(r_st)
                os.close(w_alive)
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                become_subreaper()
                spid = os.fork()
                if spid == 0:
                    os.close(w_st)
                    os.close(r_alive)
                    self._sandbox(child)                           # never returns
                child.close()
                os.write(w_st, f"{spid}\n".encode())
                while True:
                    try:
                        _, status = os.waitpid(spid, 0)
                        break
                    except InterruptedError:
                        continue
                os.write(w_st, f"{status}\n".encode())
                _linger(r_alive)
            except BaseException:                                  # noqa: BLE001 - the guard never raises
                pass
            finally:
                os._exit(0)
        child.close()
        os.close(w_st)
        os.close(r_alive)
        self.gpid, self.sock, self.r_st, self.w_alive = gpid, parent, r_st, w_alive
        self._st_buf = b""
        line = self._status_line(timeout=10)                       # the sandbox's pid
        if line is not None:
            self.spid = int(line)
            self.members = {self.spid}
            start = _statm(self.spid)
            self.base_rss = start[1] if start else 0
        return self

    def _sandbox(self, sock):
        code = BROKEN
        try:
            os.setsid()                                            # its own session and process group
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            close_sockets(keep=sock.fileno())
            capture, note = enter(self.memory, self.writable)
            self.child_main(sock, capture, note)
            code = 0
        except BaseException:                                      # noqa: BLE001
            code = BROKEN
        finally:
            os._exit(code)

    # ------------------------------------------------------------------ the judge's side

    def _status_line(self, timeout):
        end = time.monotonic() + timeout
        while b"\n" not in self._st_buf:
            left = end - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.r_st], [], [], left)
            if not ready:
                return None
            data = os.read(self.r_st, 64)
            if not data:
                self.guard_died = True
                return None
            self._st_buf += data
        line, _, self._st_buf = self._st_buf.partition(b"\n")
        return line.decode()

    def send(self, header, blobs):
        """The inputs. False when the sandbox is already gone."""
        try:
            self.sock.settimeout(max(self.time_limit, 5))
            self.sock.sendall(wire.pack(header, blobs), *([socket.MSG_NOSIGNAL] if hasattr(socket, "MSG_NOSIGNAL") else []))
            self.sock.setblocking(False)
            return True
        except OSError:
            return False

    def collect(self, on_frame):
        """Read frames until `done`, the sandbox's end, the time limit or a limit broken. on_frame(header, blobs)
        returns True at the last frame."""
        from qwen.lang import T
        reader = wire.Reader(max_frame=wire.MAX_RESULT + (1 << 20))  # the sandbox refuses larger results itself
        deadline = time.monotonic() + self.time_limit
        next_check = time.monotonic() + POLL
        sock_open = True
        while True:
            now = time.monotonic()
            if now >= deadline:
                self.verdict = ("timeout", T("did not finish within {s:g} s (an endless loop?)", "{s:g} 秒内没有结束（死循环？）",
                                             s=self.time_limit))
                return
            waits = self._waitables() + ([self.sock] if sock_open else [])
            ready, _, _ = select.select(waits, [], [], min(POLL, deadline - now))
            if self.sock in ready:
                try:
                    data = self.sock.recv(1 << 20)
                except (BlockingIOError, InterruptedError):
                    data = None
                except OSError:
                    data = b""
                if data == b"":
                    sock_open = False
                elif data:
                    try:
                        for header, blobs in reader.feed(data):
                            if on_frame(header, blobs):
                                return
                    except ValueError:
                        self.verdict = ("garbled", T("the judge could not read what your code sent back (did it write to the "
                                                     "judge's socket?)", "评测器读不懂你的代码传回的数据（它是否写了评测器的套接字？）"))
                        return
            self._update_status(ready)
            if (self.status is not None or self.guard_died) and not sock_open:
                return                                             # ended, everything it sent is read
            if (self.status is not None or self.guard_died) and sock_open and not ready:
                return                                             # ended; a child of it holds the socket
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + POLL
                if self._over_limits():
                    return

    def _waitables(self):
        return [self.r_st]

    def _update_status(self, ready):
        if self.r_st in ready and self.status is None:
            line = self._status_line(timeout=0.5)
            if line is not None:
                self.status = int(line)

    def _exit(self):
        """("signal", n) or ("exit", code) from the status, or None."""
        if self.status is None:
            return None
        if os.WIFSIGNALED(self.status):
            return "signal", os.WTERMSIG(self.status)
        return "exit", os.WEXITSTATUS(self.status) if os.WIFEXITED(self.status) else self.status

    def guard_alive(self, wait=0.05):
        """False when the guard died (its end of the status pipe closed without a status). wait: how long
        the sandbox's exit status may take to come (after `done` it exits at once; a guard it killed may
        take a moment to close the pipe, so the verdict waits for one or the other)."""
        if self.status is None and not self.guard_died:
            line = self._status_line(timeout=wait)
            if line is not None:
                self.status = int(line)
        return not self.guard_died

    def _scan(self):
        """The sandbox's session and every descendant: {pid: rss bytes}; None without /proc."""
        if not os.path.isdir("/proc/self"):
            return None
        procs = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    raw = f.read()
                rest = raw[raw.rindex(b")") + 2:].split()
                if rest[0] in (b"Z", b"X"):                        # already dead (a zombie nobody reaped)
                    continue
                procs[int(name)] = (int(rest[1]), int(rest[3]), int(rest[21]))   # ppid, session, rss pages
            except (OSError, ValueError, IndexError):
                continue
        members = {p for p, (ppid, sid, _) in procs.items() if sid == self.spid or (self.gpid and ppid == self.gpid)}
        members |= self.members & procs.keys()
        grew = True
        while grew:
            kids = {p for p, (ppid, _, _) in procs.items() if ppid in members} - members
            grew = bool(kids)
            members |= kids
        self.members |= members
        page = os.sysconf("SC_PAGE_SIZE")
        return {p: procs[p][2] * page for p in members}

    def _over_limits(self):
        from qwen.lang import T
        group = self._scan()
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
        """End the sandbox's session, every process it started, and the guard."""
        if self.spid:
            for _ in range(40):                                    # until none of them runs (2 s at most)
                self._kill_group()
                left = self._scan()
                if not left:
                    break
                time.sleep(0.05)
        if self.gpid:
            try:
                os.kill(self.gpid, signal.SIGKILL)
            except OSError:
                pass

    def _kill_group(self):
        for pid in list(self.members):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.killpg(self.spid, signal.SIGKILL)
        except OSError:
            pass

    def close(self):
        self.kill()
        if self.gpid:
            try:
                os.waitpid(self.gpid, 0)
            except OSError:
                pass
            self.gpid = None
        for closer in (self.sock.close, lambda: os.close(self.r_st), lambda: os.close(self.w_alive)):
            try:
                closer()
            except OSError:
                pass
        self._remove_tmp()

    def ending(self):
        """How the sandbox ended when it did not say `done`: (kind, message)."""
        from qwen.lang import T
        if self.verdict:
            return self.verdict
        if self.guard_died or (self.status is None and self.spid is None):
            return ("guard", T("your code ended the judge's helper process (it killed its parent process): that stops the "
                               "grading", "你的代码结束了评测器的辅助进程（它杀死了父进程）：评测因此中止"))
        how = self._exit()
        if how is None:
            return ("crash", T("your code's process stopped without a result", "你的代码所在的进程没有给出结果就停止了"))
        if how[0] == "signal":
            n = how[1]
            name = signal.Signals(n).name if n in signal.Signals._value2member_map_ else str(n)
            if n == signal.SIGKILL:
                return ("killed", T("your code was killed by signal {n} ({s}; out of memory?)",
                                    "你的代码被信号 {n}（{s}）终止（内存不够？）", n=n, s=name))
            return ("killed", T("your code was killed by signal {n} ({s})", "你的代码被信号 {n}（{s}）终止", n=n, s=name))
        code = how[1]
        if code == BROKEN:
            return ("crash", T("your code's process stopped without a result (did it close the judge's connection or "
                               "its file descriptors?)", "你的代码所在的进程没有给出结果就停止了（它是否关闭了与评测器的连接或文件描述符？）"))
        return ("exit", T("your code ended the process (os._exit({c})): return a value instead",
                          "你的代码结束了进程（os._exit({c})）：请返回一个值", c=code))


class Spawned(Sandbox):
    """The sandbox as fresh Python processes, where fork is not used (Windows, macOS, QWEN_JUDGE_SPAWN=1):

        judge ── starts ──> guard (python -m practice._judge.spawned guard) ── starts ──> sandbox

    The sandbox imports torch itself (not counted in the time limit), connects back over a localhost
    socket and runs the same code as a forked one. The guard prints the sandbox's pid, then its exit
    code, and is the process a solution can kill as its parent. Functions from a notebook travel
    as their source text (inspect.getsource): the learner's own code, at the same trust."""

    START_TIMEOUT = 120                                          # importing torch in a fresh process

    def __init__(self, job, memory, time_limit):
        super().__init__(None, memory, time_limit)
        self.job = job
        self.proc = None
        self.lines = None

    def start(self):
        import json
        import queue
        import subprocess
        import threading
        root = str(Path(__file__).resolve().parents[2])
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(self.START_TIMEOUT)
        job = {**self.job, "port": server.getsockname()[1], "memory": self.memory, "writable": self._make_tmp()}
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p),
               "OMP_NUM_THREADS": "1"}
        self._errors = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "practice._judge.spawned", "guard"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._errors, env=env)
        self.lines = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(x) for x in self.proc.stdout] + [self.lines.put(None)],
                         daemon=True).start()
        try:
            self.proc.stdin.write(json.dumps(job).encode())
            self.proc.stdin.close()
            line = self._status_line(timeout=30)
            self.spid = int(line) if line else None
            if self.spid is None:
                raise OSError("no sandbox")
            if os.name == "posix":
                self.gpid = self.proc.pid                         # its orphans are the guard's children (Linux)
            self.members = {self.spid}
            self.sock, _ = server.accept()
            start = _statm(self.spid)
            self.base_rss = start[1] if start else 0
        except (OSError, ValueError):
            self.sock = socket.socket()
            self.spid = None
        finally:
            server.close()
        return self

    def _status_line(self, timeout):
        import queue
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            return None
        if line is None:
            self.guard_died = True
            return None
        return line.decode().strip()

    def _waitables(self):
        return []

    def _update_status(self, ready):
        if self.status is None and not self.guard_died and not self.lines.empty():
            line = self._status_line(timeout=0)
            if line is not None:
                self.status = int(line)

    def _exit(self):
        if self.status is None:
            return None
        return ("signal", -self.status) if self.status < 0 else ("exit", self.status)

    def guard_alive(self, wait=0.1):
        if self.status is None and not self.guard_died:
            line = self._status_line(timeout=wait)
            if line is not None:
                self.status = int(line)
        return not self.guard_died

    def _kill_group(self):
        if os.name == "posix":
            super()._kill_group()
        elif self.spid:
            import subprocess
            subprocess.run(["taskkill", "/F", "/T", "/PID", str(self.spid)], capture_output=True)

    def kill(self):
        super().kill()
        if self.proc is not None:
            try:
                self.proc.kill()
            except OSError:
                pass

    def close(self):
        self.kill()
        if self.proc is not None:
            try:
                self.proc.wait(5)
            except Exception:                                     # noqa: BLE001
                pass
        try:
            self.sock.close()
        except OSError:
            pass
        self._remove_tmp()

    def ending(self):
        from qwen.lang import T
        if self.spid is None and not self.verdict:
            try:
                self._errors.seek(0)
                last = (self._errors.read().decode("utf-8", "replace").strip().splitlines() or [""])[-1]
            except (OSError, ValueError):
                last = ""
            return ("crash", T("the grading process did not start: {m}", "评测进程没有启动：{m}", m=last or "?"))
        return super().ending()


def read_frame(sock, reader=None):
    """The sandbox's side: one whole frame from the judge (blocking)."""
    reader = reader or wire.Reader()
    while True:
        data = sock.recv(1 << 20)
        if not data:
            raise EOFError("the judge went away")
        frames = reader.feed(data)
        if frames:
            return frames[0]


def count_printed(capture):
    try:
        capture.flush()
        capture.seek(0)
        text = io.TextIOWrapper(capture, encoding="utf-8", errors="replace").read()
        return len([line for line in text.splitlines() if line.strip()])
    except (OSError, ValueError):
        return 0
