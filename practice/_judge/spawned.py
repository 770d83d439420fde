"""The sandbox as fresh processes (where fork is not used): `python -m practice._judge.spawned guard`.

The guard reads the job (JSON) on stdin, starts the sandbox (`... spawned sandbox`, a session of
its own), prints its pid, waits, and prints its exit code: a solution that kills its parent kills
the guard, not the judge. The sandbox connects back to the judge and runs exactly what a forked
sandbox runs (runner.child_main). Functions from a notebook arrive as source text, with what they use (portable.py).
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time


def guard():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    job = sys.stdin.buffer.read()
    judge = os.getppid()
    linux = sys.platform.startswith("linux")
    if linux:
        from practice._judge.sandbox import become_subreaper
        become_subreaper()                       # orphans of the sandbox (double fork, setsid) stay below the guard
    flags = {"start_new_session": True} if os.name == "posix" else {
        "creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)}
    child = subprocess.Popen([sys.executable, "-m", "practice._judge.spawned", "sandbox"], stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, **flags)
    print(child.pid, flush=True)
    child.stdin.write(job)
    child.stdin.close()
    print(child.wait(), flush=True)
    while linux and os.getppid() == judge:       # until the judge has ended the orphans and this guard, or is gone
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        time.sleep(0.2)


def sandbox():
    job = json.loads(sys.stdin.buffer.read())
    import torch  # noqa: F401 - imported before the clock starts, as in the judge
    from practice._judge import runner
    from practice._judge import sandbox as box
    sock = socket.create_connection(("127.0.0.1", job["port"]))
    capture, note = box.enter(job["memory"], job["writable"])
    runner.child_main(job)(sock, capture, note)
    os._exit(0)


if __name__ == "__main__":
    guard() if sys.argv[1:] == ["guard"] else sandbox()
