"""Judge benchmark: grading one exercise and all six, as a learner runs them.

    python bench/bench_judge.py

Targets (issue 8): grading one exercise <= 3 s wall; --all <= 15 s.
`import torch` alone is printed beside them for scale. Uses the reference solutions as the
learner's files (in a temp folder) and the built-in tiny checkpoint. The peak RSS column is the
judge's own process: each grading runs in a sandbox forked from it (through a guard process).
"""
import shutil
import sys
import tempfile
from pathlib import Path

from common import ENV, ROOT, measure, python, report

work = Path(tempfile.mkdtemp(prefix="judge-bench-"))
try:
    sys.path.insert(0, str(ROOT))
    from practice._judge.exercises import EXERCISES
    gradings = sum(2 + len(ex.equivalents()) + len(ex.wrong) for ex in EXERCISES)
    for ex in EXERCISES:
        shutil.copyfile(ROOT / "practice" / "_judge" / "solutions" / f"s{ex.id}.py", work / ex.filename)
    ENV.update({"QWEN_PRACTICE_DIR": str(work), "QWEN_PROGRESS": str(work / "progress.json")})
    judge = [sys.executable, str(ROOT / "practice" / "judge.py"), "--tiny"]
    measure(judge + ["204"], 1)                                        # builds the tiny checkpoint if needed
    rows = {
        "python -c 'import torch'": measure(python("import torch"), 3),
        "python practice/judge.py 204": measure(judge + ["204"], 3),
        "python practice/judge.py --all": measure(judge + ["--all"], 3),
        f"python practice/judge.py --verify ({gradings} gradings)": measure(judge + ["--verify"], 1),
    }
    ok = report(rows, [("grading one exercise, wall (s)", rows["python practice/judge.py 204"][0], 3.0),
                       ("grading all exercises, wall (s)", rows["python practice/judge.py --all"][0], 15.0)])
    torch_s, one_s = rows["python -c 'import torch'"][0], rows["python practice/judge.py 204"][0]
    print(f"\nthe judge's own cost over `import torch` (side by side, this machine): {one_s - torch_s:+.2f} s for one "
          f"exercise (x{one_s / torch_s:.2f}), {rows['python practice/judge.py --all'][0] - torch_s:+.2f} s for --all")
    sys.exit(0 if ok else 1)
finally:
    shutil.rmtree(work, ignore_errors=True)
