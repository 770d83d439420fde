"""What the sandbox sets up before the learner's code runs (runner.py calls `enter`): limits, not walls.

    the environment   started clean by the judge (sandbox.clean_env): no QWEN_PROGRESS, no tokens, no
                      SSH_AUTH_SOCK or D-Bus address; TMPDIR and the working folder are the sandbox's own
    output            prints, C-level output and stray threads go to a capture file; stdin is /dev/null
    limits            the address space it may add (RLIMIT_AS), file sizes (RLIMIT_FSIZE), processes
                      (RLIMIT_NPROC), no core files
    processes         (Linux) what it orphans is re-parented to it, so the judge ends it with the grading

It is the learner's own code on the learner's own machine: nothing here stops it from reading or
writing the learner's files, opening connections or signalling other processes, and the README says so.
What keeps a verdict honest is elsewhere: the expected values never enter the sandbox, and what comes
back is decoded as plain data and compared in the judge's process.
"""
import ctypes
import os
import sys
import tempfile


def become_subreaper():
    """(Linux) What the sandbox orphans (a double fork, a new session) is re-parented here instead of to
    init, so the judge still finds it among this process's descendants and ends it with the grading."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)            # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


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
    os.environ["TMPDIR"] = tempfile.tempdir = job["folder"]
    os.chdir(job["folder"])                                               # a working folder of its own
    capture = tempfile.TemporaryFile()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(capture.fileno(), 1)
    os.dup2(capture.fileno(), 2)
    sys.stdin = open(0, encoding="utf-8", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)
    return capture, set_limits(job["memory"])
