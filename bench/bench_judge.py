"""Judge benchmark: grading one exercise, all of them, and a Run from the practice page, as a learner does.

    python bench/bench_judge.py

Targets: grading one exercise <= 3 s wall; --all <= 15 s; a Run on the page <= 2 s (the page is open,
the learner presses Run: a sandbox process started ahead with the page, so a Run is that process's work, the cases
and the comparison). `import torch` alone is printed beside them for scale. Uses the reference
solutions as the learner's files (in a temp folder) and the built-in tiny checkpoint. The peak RSS
column is the judge's own process (its sandbox processes are others).
"""
import http.client
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ENV, ROOT, Pressure, cpu_line, measure, python, report


def page_runs(exercise, rounds):
    """Wall seconds of `rounds` Runs of `exercise` on a page served by `judge.py --web --tiny`."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "practice" / "judge.py"), "--web", "--no-browser", "--tiny"],
                            cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port, token = re.search(r":(\d+)/\?token=(\S+)", proc.stdout.readline()).groups()
        headers = {"Host": f"127.0.0.1:{port}", "X-Token": token, "Content-Type": "application/json"}

        def ask(method, path):
            conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=120)
            conn.request(method, path, body=b"" if method == "POST" else None, headers=headers)
            reply = conn.getresponse()
            body = json.loads(reply.read())
            conn.close()
            if reply.status != 200:
                raise SystemExit(f"{method} {path}: {reply.status} {body}")
            return body

        ask("GET", f"/api/exercise/{exercise}")                           # the learner opens the exercise
        walls = []
        for _ in range(rounds):
            start = time.perf_counter()
            result = ask("POST", f"/api/exercise/{exercise}/run")
            walls.append(time.perf_counter() - start)
            if result["status"] != "pass":
                raise SystemExit(f"the reference of {exercise} did not pass on the page: {result['lines'][:2]}")
        return walls
    finally:
        proc.kill()
        proc.wait()


work = Path(tempfile.mkdtemp(prefix="judge-bench-"))
try:
    sys.path.insert(0, str(ROOT))
    from practice._judge.exercises import EXERCISES
    gradings = sum(2 + len(ex.equivalents()) + len(ex.wrong) for ex in EXERCISES)
    for ex in EXERCISES:
        shutil.copyfile(ROOT / "practice" / "_judge" / "solutions" / f"s{ex.id}.py", work / ex.filename)
    ENV.update({"QWEN_PRACTICE_DIR": str(work), "QWEN_PROGRESS": str(work / "progress.json")})
    print(cpu_line())
    pressure = Pressure()
    judge = [sys.executable, str(ROOT / "practice" / "judge.py"), "--tiny"]
    measure(judge + ["204"], 1)                                        # builds the tiny checkpoint if needed
    rows = {
        "python -c 'import torch'": measure(python("import torch"), 3),
        "python practice/judge.py 204": measure(judge + ["204"], 3),
        "python practice/judge.py --all": measure(judge + ["--all"], 3),
        f"python practice/judge.py --verify ({gradings} gradings)": measure(judge + ["--verify"], 1),
    }
    runs = page_runs("204", 5)
    print(f"\nRun of 204 on the page, 5 in a row (s): {' '.join(f'{w:.2f}' for w in runs)}")
    ok = report(rows, [("grading one exercise, wall (s)", rows["python practice/judge.py 204"][0], 3.0),
                       ("grading all exercises, wall (s)", rows["python practice/judge.py --all"][0], 15.0),
                       ("a Run on the page, median wall (s)", statistics.median(runs), 2.0),
                       ("a Run on the page, the slowest (s)", max(runs), 2.0)])
    torch_s, one_s = rows["python -c 'import torch'"][0], rows["python practice/judge.py 204"][0]
    print(f"\nthe judge's own cost over `import torch` (side by side, this machine): {one_s - torch_s:+.2f} s for one "
          f"exercise (x{one_s / torch_s:.2f}), {rows['python practice/judge.py --all'][0] - torch_s:+.2f} s for --all")
    print(pressure.verdict())
    sys.exit(0 if ok else 1)
finally:
    shutil.rmtree(work, ignore_errors=True)
