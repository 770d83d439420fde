"""Chapter 14 run as a learner runs it (--tiny, both languages): its printed numbers hold."""
import math
import re


def test_chapter_14_prints_what_it_computes(run_script):
    r = run_script("ch14_loss.py", "--tiny")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    loss, v, ln_v = re.search(r"loss = ([\d.]+); ln\(V\) = ln\((\d+)\) = ([\d.]+)", out).groups()
    assert abs(float(ln_v) - math.log(int(v))) < 1e-4
    assert abs(float(loss) - float(ln_v)) < 3.0                       # random weights: near ln(V)
    assert "gradcheck in float64: True" in out
    assert float(re.search(r"autograd's dx: ([\d.e+-]+)", out).group(1)) < 1e-5
    assert float(re.search(r"difference in any weight: ([\d.e+-]+)", out).group(1)) < 1e-6
    first, last = map(float, re.search(r"step 0: ([\d.]+); after \d+ steps: ([\d.]+)", out).groups())
    assert last < first - 0.5                                         # the loss falls
    kept, formula = re.search(r"= (\d+) bytes; formula 16 x P = (\d+)", out).groups()
    assert kept == formula
    rows = re.findall(r"(\d+) tokens: activations kept (\d+) KiB; with checkpointing (\d+) KiB", out)
    sizes = [int(a) for _, a, _ in rows]
    assert len(rows) == 3 and sizes[0] < sizes[1] < sizes[2]          # grows with the sequence
    assert all(int(c) < int(a) for _, a, c in rows)                   # checkpointing keeps less
    assert "Exercises for this chapter: 270 (the loss), 271 (RMSNorm's backward), 272 (one AdamW step)" in out


def test_chapter_14_runs_in_chinese(run_script):
    r = run_script("ch14_loss.py", "--tiny", "--lang", "zh")
    assert r.returncode == 0, r.stderr
    assert "损失" in r.stdout and "gradcheck" in r.stdout and "Traceback" not in r.stderr
