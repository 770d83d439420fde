"""What the sandbox gives up before the learner's code runs (runner.py calls `enter`).

    the environment   started clean by the judge (sandbox.clean_env): no QWEN_PROGRESS, no tokens, no
                      SSH_AUTH_SOCK or D-Bus address; TMPDIR is the sandbox's own folder
    output            prints, C-level output and stray threads go to a capture file; stdin is /dev/null
    imports           the judge's modules (the cases, the references) cannot be imported
    Landlock          (Linux 5.13+) file writes only in the sandbox's own folder, $QWEN_JUDGE_WRITABLE and
                      /dev/shm; no ptrace or /proc/<pid>/mem of processes outside the sandbox; from ABI 4
                      no TCP bind or connect; from ABI 6 no signal to, and no abstract Unix socket of, a
                      process outside the sandbox
    seccomp           (Linux on x86-64 and arm64) no new socket of any kind (TCP, UDP, Unix: so no
                      connection, whatever the flags), no io_uring (which could make one), no signal but
                      to the sandbox's own process group (nor a SIGIO owner set with fcntl), no ptrace, and
                      no leaving the session: every process it starts stays where the judge ends it
    limits            the address space it may add (RLIMIT_AS), file sizes (RLIMIT_FSIZE), processes
                      (RLIMIT_NPROC), no core files; the working folder is the sandbox's own

Where a mechanism is missing (another OS, an old kernel) the sandbox runs without it, and the README
says what then still holds.
"""
import ctypes
import os
import struct
import sys
import tempfile
from pathlib import Path

JUDGE = Path(__file__).resolve().parent            # practice/_judge
ROOT = JUDGE.parents[1]


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


# ------------------------------------------------------------------------------------------ Landlock

_LL_WRITE = (1 << 1) | (1 << 4) | (1 << 5) | sum(1 << b for b in range(6, 13))   # write, remove, make *
_LL_REFER, _LL_TRUNCATE = 1 << 13, 1 << 14                                         # ABI 2, ABI 3
_LL_TCP = (1 << 0) | (1 << 1)                                                      # ABI 4: bind, connect
_LL_SCOPES = (1 << 0) | (1 << 1)                                                   # ABI 6: abstract Unix, signal
_CREATE, _ADD_RULE, _RESTRICT = 444, 445, 446                                      # the same on every architecture


def landlock_abi():
    """The kernel's Landlock ABI version: 0 where there is none (not Linux, an old kernel, disabled)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        return max(0, _libc().syscall(_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))
    except (OSError, AttributeError):
        return 0


def landlock(writable):
    """Writes only beneath `writable` and /dev/shm (and devices such as /dev/null opened for writing); ptrace
    and /proc/<pid>/mem only within the sandbox; TCP (ABI 4), signals and abstract sockets (ABI 6) only
    within the sandbox. Returns the ABI applied, 0 where Landlock is absent."""
    abi = landlock_abi()
    if abi < 1:
        return 0
    libc = _libc()
    handled = _LL_WRITE | (_LL_REFER if abi >= 2 else 0) | (_LL_TRUNCATE if abi >= 3 else 0)
    fields = [handled] + ([_LL_TCP] if abi >= 4 else []) + ([_LL_SCOPES] if abi >= 6 else [])
    attr = ctypes.create_string_buffer(struct.pack(f"<{len(fields)}Q", *fields))
    ruleset = libc.syscall(_CREATE, attr, ctypes.c_size_t(len(attr.raw)), ctypes.c_uint32(0))
    if ruleset < 0:
        return 0
    try:
        device = (1 << 1) | (_LL_TRUNCATE if abi >= 3 else 0)              # open devices for writing (/dev/null, a GPU)
        for where, allowed in [(str(d), handled) for d in writable] + [("/dev", device), ("/dev/shm", handled)]:
            try:
                fd = os.open(where, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                rule = ctypes.create_string_buffer(struct.pack("<Qi", allowed, fd))
                libc.syscall(_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(1), rule, ctypes.c_uint32(0))
            finally:
                os.close(fd)
        if libc.prctl(38, 1, 0, 0, 0) != 0:                                # PR_SET_NO_NEW_PRIVS, required first
            return 0
        return abi if libc.syscall(_RESTRICT, ctypes.c_int(ruleset), ctypes.c_uint32(0)) == 0 else 0
    finally:
        os.close(ruleset)


# ------------------------------------------------------------------------------------------ seccomp

# (audit architecture, {name: number}) of the architectures the filter knows
_SYSCALLS = {
    "x86_64": (0xC000003E, dict(socket=41, setsid=112, setpgid=109, kill=62, tkill=200, tgkill=234, rt_sigqueueinfo=129,
                                rt_tgsigqueueinfo=297, pidfd_send_signal=424, io_uring_setup=425, ptrace=101,
                                process_vm_readv=310, process_vm_writev=311, fcntl=72)),
    "aarch64": (0xC00000B7, dict(socket=198, setsid=157, setpgid=154, kill=129, tkill=130, tgkill=131, rt_sigqueueinfo=138,
                                 rt_tgsigqueueinfo=240, pidfd_send_signal=424, io_uring_setup=425, ptrace=117,
                                 process_vm_readv=270, process_vm_writev=271, fcntl=25)),
}
_ALLOW, _EPERM, _EACCES = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 13


def _filter(arch, nr, group):
    """The BPF program: refused syscalls answer EPERM (EACCES for socket: "permission denied", as a
    firewall would); a signal is allowed to 0 (the own group), the sandbox's leader and its group."""
    ld = lambda offset: (0x20, 0, 0, offset)                                    # noqa: E731  A = data[offset]
    prog = [ld(4), (0x15, 1, 0, arch), (0x06, 0, 0, _EPERM),                    # another ABI (i386 on x86-64): refused
            ld(0), (0x35, 0, 1, 0x40000000), (0x06, 0, 0, _EPERM)]              # x32 syscall numbers: refused
    refused = [nr[n] for n in ("setsid", "setpgid", "tkill", "pidfd_send_signal", "io_uring_setup", "ptrace",
                               "process_vm_readv", "process_vm_writev")]
    for n in refused:
        prog += [(0x15, 0, 1, n), (0x06, 0, 0, _EPERM)]
    prog += [(0x15, 0, 1, nr["socket"]), (0x06, 0, 0, _EACCES)]
    prog += [(0x15, 0, 6, nr["fcntl"]), ld(24),                                # fcntl(fd, cmd): arg 1's low 32 bits
             (0x15, 2, 0, 8), (0x15, 1, 0, 10), (0x15, 0, 1, 15),               # F_SETOWN, F_SETSIG, F_SETOWN_EX:
             (0x06, 0, 0, _EPERM), (0x06, 0, 0, _ALLOW)]                        # SIGIO aimed at another process
    for n in (nr["kill"], nr["tgkill"], nr["rt_sigqueueinfo"], nr["rt_tgsigqueueinfo"]):
        prog += [(0x15, 0, 6, n), ld(16),                                       # the target: low 32 bits of arg 0
                 (0x15, 3, 0, 0), (0x15, 2, 0, group), (0x15, 1, 0, (-group) & 0xFFFFFFFF),
                 (0x06, 0, 0, _EPERM), (0x06, 0, 0, _ALLOW), ld(0)]
    prog.append((0x06, 0, 0, _ALLOW))
    return prog


def seccomp():
    """Installs the filter in this process (inherited by every process it starts). True when applied."""
    import platform
    known = _SYSCALLS.get(platform.machine().lower().replace("arm64", "aarch64").replace("amd64", "x86_64"))
    if not sys.platform.startswith("linux") or known is None or sys.byteorder != "little":
        return False
    arch, nr = known
    prog = _filter(arch, nr, os.getpid())
    raw = b"".join(struct.pack("<HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(raw)
    fprog = struct.pack("<HxxxxxxQ" if ctypes.sizeof(ctypes.c_void_p) == 8 else "<HxxI", len(prog),
                        ctypes.addressof(buf))
    libc = _libc()
    if libc.prctl(38, 1, 0, 0, 0) != 0:                                         # PR_SET_NO_NEW_PRIVS
        return False
    arg = ctypes.create_string_buffer(fprog)
    return libc.prctl(22, 2, ctypes.c_void_p(ctypes.addressof(arg)), 0, 0) == 0  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER


def become_subreaper():
    """(Linux) What the sandbox orphans (a double fork) is re-parented here instead of to init, so the judge
    still finds it among this process's descendants."""
    try:
        _libc().prctl(36, 1, 0, 0, 0)                                       # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


# ------------------------------------------------------------------------------------------ imports

def _inside(where, roots):
    where = os.path.realpath(where)
    return any(where == r or where.startswith(r + os.sep) for r in map(os.path.realpath, roots))


class _NoJudgeImports:
    """A meta path finder, first in sys.meta_path: importing a module that lives in practice/_judge/ (the
    references, the cases, the comparison) or practice/judge.py raises ImportError."""
    roots = (JUDGE, ROOT / "practice" / "judge.py")

    def find_spec(self, name, path=None, target=None):
        import importlib.machinery
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        places = [spec.origin] + list(spec.submodule_search_locations or []) if spec is not None else []
        if any(p and _inside(p, self.roots) for p in places):
            from qwen.lang import T
            raise ImportError(T("{n} is part of the judge: the sandbox does not import it",
                                "{n} 是评测器的一部分：沙箱里不能导入它", n=name), name=name)
        return None

    def invalidate_caches(self):
        pass


def seal():
    """The judge's modules leave sys.modules (and the `practice` package's attributes), and a finder refuses
    to import them again. The code already running here keeps its references."""
    for name, module in list(sys.modules.items()):
        where = getattr(module, "__file__", None)
        if name.startswith(("practice._judge", "practice.judge")) or (where and _inside(where, _NoJudgeImports.roots)):
            del sys.modules[name]
    for attr in ("_judge", "judge"):
        if hasattr(sys.modules.get("practice"), attr):
            delattr(sys.modules["practice"], attr)
    sys.meta_path.insert(0, _NoJudgeImports())


# ------------------------------------------------------------------------------------------ limits

def _address_space():
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


MAX_FILE = 1 << 30                                 # the largest file the sandbox may write (RLIMIT_FSIZE)
MAX_TASKS = 256                                    # processes and threads it may add (RLIMIT_NPROC)


def _user_tasks():
    """Processes and threads of this user now (RLIMIT_NPROC counts them all), or None without /proc."""
    uid, n = str(os.getuid()), 0
    try:
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/status", "rb") as f:
                        fields = dict(line.split(b":", 1) for line in f.read().splitlines() if b":" in line)
                    if fields[b"Uid"].split()[0].decode() == uid:
                        n += int(fields[b"Threads"])
                except (OSError, KeyError, ValueError):
                    continue
    except OSError:
        return None
    return n


def set_limits(extra):
    """Cap this process's address space at its current size + extra, the files it writes (MAX_FILE), the
    processes it adds (MAX_TASKS; not enforced for root), no core files. Returns None, or a one-line note."""
    from qwen.lang import T
    try:
        import resource
    except ImportError:
        return T("no memory limit on this system (no resource module): graded without one",
                 "这个系统上没有内存限制（没有 resource 模块）：不设内存限制地评测")

    def cap(which, value):
        """The soft limit lowered to value (the hard one if lower); the error, or None."""
        try:
            hard = resource.getrlimit(which)[1]
            resource.setrlimit(which, (value if hard == resource.RLIM_INFINITY else min(value, hard), hard))
        except (ValueError, OSError) as e:
            return e
    cap(resource.RLIMIT_CORE, 0)
    cap(resource.RLIMIT_FSIZE, MAX_FILE)
    tasks = _user_tasks()
    if tasks is not None and hasattr(resource, "RLIMIT_NPROC"):
        cap(resource.RLIMIT_NPROC, tasks + MAX_TASKS)
    now = _address_space()
    if now is None:
        return T("the memory limit needs /proc (Linux): graded without it", "内存限制需要 /proc（Linux）：不设内存限制地评测")
    error = cap(resource.RLIMIT_AS, now + extra)
    return error and T("could not set the memory limit ({e}): graded without it", "无法设置内存限制（{e}）：不设内存限制地评测",
                       e=error)


# ------------------------------------------------------------------------------------------ all of it

def enter(job):
    """In the sandbox, before any learner code: returns (capture file, note or None)."""
    import signal
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    writable = [str(p) for p in job["writable"]]
    os.environ["TMPDIR"] = tempfile.tempdir = writable[0]
    os.chdir(writable[0])                                                 # a working folder of its own
    capture = tempfile.TemporaryFile()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(capture.fileno(), 1)
    os.dup2(capture.fileno(), 2)
    sys.stdin = open(0, encoding="utf-8", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)
    if not (job.get("file") and _inside(job["file"], [JUDGE])):          # the judge's own wrong/ files reuse references
        seal()
    landlock(writable)
    seccomp()
    return capture, set_limits(job["memory"])
