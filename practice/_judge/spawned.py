"""The sandbox as fresh processes (where fork is not used): `python -m practice._judge.spawned guard`.

The guard reads the job (JSON) on stdin, starts the sandbox (`... spawned sandbox`, a session of
its own), prints its pid, waits, and prints its exit code: a solution that kills its parent kills
the guard, not the judge. The sandbox connects back to the judge and runs exactly what a forked
sandbox runs (runner.child_main). Functions from a notebook arrive as source text.
"""
import json
import os
import signal
import socket
import subprocess
import sys


def guard():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    job = sys.stdin.buffer.read()
    flags = {"start_new_session": True} if os.name == "posix" else {
        "creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)}
    child = subprocess.Popen([sys.executable, "-m", "practice._judge.spawned", "sandbox"], stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, **flags)
    print(child.pid, flush=True)
    child.stdin.write(job)
    child.stdin.close()
    print(child.wait(), flush=True)


def sandbox():
    job = json.loads(sys.stdin.buffer.read())
    import torch  # noqa: F401 - imported before the clock starts, as in the judge
    from practice._judge import runner
    from practice._judge import sandbox as box
    sock = socket.create_connection(("127.0.0.1", job["port"]))
    capture, note = box.enter(job["memory"])
    if job.get("sources"):
        space = {"torch": torch, "F": torch.nn.functional, "math": __import__("math")}
        for source in job["sources"].values():
            exec(compile(source, "<notebook>", "exec"), space)
        job["found"] = {name: space.get(name) for name in job["sources"]}
    runner.child_main(job)(sock, capture, note)
    os._exit(0)


if __name__ == "__main__":
    guard() if sys.argv[1:] == ["guard"] else sandbox()
