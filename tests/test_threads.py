"""The thread policy (engine/threads.py): what it picks, that chapters apply it, that none leaks into the next."""
import subprocess
import sys

import pytest
import torch

from conftest import ROOT
from qwen.lang import QwenError, set_lang
from engine.threads import Choice, busy_cores, choose, note, use


@pytest.fixture
def restore_threads():
    """Tests here change torch's thread count in this process: it is put back after each."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_small_work_gets_one_thread_and_full_work_the_free_cores():
    assert choose(small=True, env={}, load=0.0, default=8, ncores=8).threads == 1
    assert choose(small=False, env={}, load=0.0, default=8, ncores=8).threads == 8       # idle machine
    assert choose(small=False, env={}, load=1.0, default=8, ncores=8).threads == 8       # the 1 is this process
    assert choose(small=False, env={}, load=4.0, default=8, ncores=8).threads == 5       # 3 cores busy elsewhere
    assert choose(small=False, env={}, load=6.0, default=2, ncores=2).threads == 1       # all busy: still 1
    assert choose(small=False, env={}, load=0.0, default=4, ncores=8).threads == 4       # never above torch's default
    busy = choose(small=False, env={}, load=4.0, default=8, ncores=8)
    assert busy.why_en.startswith("5 of 8 cores: other programs keep about 3.0 busy"), busy
    assert busy_cores(0.4) == 0.0 and busy_cores(2.5) == 1.5


def test_the_environment_wins_qwen_threads_first():
    assert choose(small=False, env={"OMP_NUM_THREADS": "1"}, load=0.0, default=8, ncores=8).threads == 1
    assert choose(small=True, env={"OMP_NUM_THREADS": "4,2"}).threads == 4               # OpenMP's nested form
    assert choose(small=True, env={"OMP_NUM_THREADS": "3", "QWEN_THREADS": "2"}).threads == 2
    assert choose(small=True, env={"OMP_NUM_THREADS": "lots"}).threads == 1              # not ours to judge
    said = choose(small=True, env={"QWEN_THREADS": " 3 "})
    assert said == Choice(3, "QWEN_THREADS=3", "QWEN_THREADS=3")


@pytest.mark.parametrize("value", ["0", "two", "-1", "1.5"])
def test_a_bad_qwen_threads_is_one_line_naming_it(value):
    with pytest.raises(QwenError) as e:
        choose(small=True, env={"QWEN_THREADS": value})
    assert f"QWEN_THREADS={value!r} is not a thread count" in e.value.en and "\n" not in e.value.en
    assert "不是线程数：" in e.value.zh


def test_a_thread_count_far_past_the_cores_is_refused_or_capped():
    """QWEN_THREADS=999999 (or OMP_NUM_THREADS) is refused or capped before torch.set_num_threads, which
    crashes on it (segfault, rc 139)."""
    from engine.threads import most_threads
    with pytest.raises(QwenError) as e:
        choose(small=True, env={"QWEN_THREADS": "999999"})
    assert "QWEN_THREADS=999999 is more threads than this machine can use" in e.value.en and "超出了" in e.value.zh
    assert choose(small=True, env={"OMP_NUM_THREADS": "999999"}).threads == most_threads()
    assert choose(small=True, env={"QWEN_THREADS": str(most_threads())}).threads == most_threads()


def test_use_sets_torchs_threads_and_note_says_how_many(restore_threads, capsys):
    use(Choice(3, "QWEN_THREADS=3", "QWEN_THREADS=3"))
    assert torch.get_num_threads() == 3
    note(choose(small=True, env={}))
    note(Choice(2, "QWEN_THREADS=2", "QWEN_THREADS=2"))
    set_lang("zh")
    note(Choice(2, "QWEN_THREADS=2", "QWEN_THREADS=2"))
    assert capsys.readouterr().out.splitlines() == [
        "  (timed with 1 thread: the work is too small to split across threads; QWEN_THREADS=N to change)",
        "  (timed with 2 threads: QWEN_THREADS=2)",
        "  （计时使用 2 个线程：QWEN_THREADS=2）"]


def test_a_chapter_on_the_tiny_checkpoint_computes_with_one_thread(tiny_path, monkeypatch, restore_threads):
    """A chapter on the tiny checkpoint computes with one thread, not torch's default of one per core:
    on a loaded 2-core machine chapter 9's prefill reads 11 tokens/s with the default, 1776 with one."""
    import engine.cli as cli
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cli, "_banner_shown", True)
    torch.set_num_threads(2)
    ch = cli.chapter("c", "c", argv=["--tiny"])
    assert torch.get_num_threads() == 1 and ch.threads.threads == 1
    monkeypatch.setenv("QWEN_THREADS", "3")
    ch = cli.chapter("c", "c", argv=["--tiny"])
    assert torch.get_num_threads() == 3 and ch.threads.why_en == "QWEN_THREADS=3"


SETS_ONE = ("import torch\nfrom engine.cli import chapter\n"
            "ch = chapter('Chapter 7', 'Chapter 7')\ntorch.set_num_threads(1)\n")     # sets 1 thread, as chapter 7 does
PROBE = "import torch\nprint('PROBE threads', torch.get_num_threads())\n"
COURSE = r"""
import sys, torch
import main
chapters = {7: main.Path(sys.argv[1]), 8: main.Path(sys.argv[2])}
main.chapters = lambda: chapters
torch.set_num_threads(3)                       # the setting a chapter starts from, as on a 3-core machine
main.main(["--tiny", "--lang", "en"])
"""


def test_no_chapter_leaks_its_thread_setting_into_the_next(tmp_path):
    """Inside main.py, a chapter after one that sets 1 thread starts from 3 again: chapters 8-9 inheriting
    chapter 7's one thread would print single-thread speeds with nothing saying so."""
    (tmp_path / "ch07_sets_one.py").write_text(SETS_ONE, encoding="utf-8")
    (tmp_path / "ch08_probe.py").write_text(PROBE, encoding="utf-8")
    r = subprocess.run([sys.executable, "-c", COURSE, str(tmp_path / "ch07_sets_one.py"), str(tmp_path / "ch08_probe.py")],
                       cwd=ROOT, capture_output=True, text=True, encoding="utf-8", timeout=100)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "# ch07_sets_one.py" in r.stdout and "PROBE threads 3" in r.stdout, r.stdout[-500:]


def test_chapters_say_how_many_threads_their_timings_used(course_en):
    """Under each timing of chapters 5, 7, 8 and 9, one line says how many threads it used and why (the
    suite's processes run with OMP_NUM_THREADS=1: tests/conftest.py)."""
    lines = course_en.splitlines()
    said = "  (timed with 1 thread: OMP_NUM_THREADS=1; QWEN_THREADS=N to change)"
    for timing in ("bf16 takes", "(best of 3 runs at 64 tokens", "parameters in fp32:", "tokens/s; reply"):
        at = next(i for i, line in enumerate(lines) if timing in line)
        assert said in lines[at + 1:at + 3], lines[at:at + 3]
