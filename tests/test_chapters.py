"""The chapter scripts and main.py, run end to end as a learner would (offline, tiny checkpoint)."""
import ast
import re

from conftest import ROOT

BANNER = "BUILT-IN TINY CHECKPOINT"


def test_ch01_on_the_tiny_checkpoint(run_script, tiny_path):
    r = run_script("ch01_weights.py", "--model", tiny_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.count(BANNER) == 1                                    # once, at the top
    assert "header length n = " in out and "-> same" in out           # hand-read header == library
    assert "model.safetensors-00001-of-00001.safetensors" in out
    assert "L L L F L L L F" in out
    assert "F32     12 tensors   linear_attn.A_log, linear_attn.norm.weight" in out
    assert "The language model the course builds: 108 tensors" in out
    assert "1.001 stored in bf16 becomes 1.0" in out


def test_ch01_in_chinese(run_script, tiny_path):
    r = run_script("ch01_weights.py", "--model", tiny_path, "--lang", "zh")
    assert r.returncode == 0, r.stderr
    assert "内置小检查点" in r.stdout and "手工读取 safetensors 文件头" in r.stdout
    assert "Reading a safetensors header" not in r.stdout


def test_main_falls_back_to_the_tiny_checkpoint_with_a_banner(run_script):
    r = run_script("main.py")                                        # offline, nothing cached
    assert r.returncode == 0, r.stderr
    assert "Could not find Qwen/Qwen3.5-0.8B" in r.stdout and BANNER in r.stdout
    assert "# ch01_weights.py" in r.stdout and "Done: chapter(s) 1" in r.stdout


def test_main_runs_one_chapter_and_rejects_unknown_ones(run_script):
    r = run_script("main.py", "1", "--tiny", "--lang", "zh")
    assert r.returncode == 0 and "内置小检查点" in r.stdout and "Could not find" not in r.stdout
    r = run_script("main.py", "99", "--tiny")
    assert r.returncode == 2 and "unknown chapter '99'" in r.stderr and "Traceback" not in r.stderr


def test_chapter_scripts_are_jupytext_percent_notebooks():
    for script in sorted(ROOT.glob("ch[0-9][0-9]_*.py")):
        text = script.read_text(encoding="utf-8")
        assert text.startswith("# %% [markdown]"), script.name
        cells = re.split(r"^# %%.*$", text, flags=re.M)
        assert len(cells) >= 6, script.name
        ast.parse(text)


def test_ch03_on_the_tiny_checkpoint(run_script, tiny_path, tmp_path):
    r = run_script("ch03_norm.py", "--model", tiny_path, "--plot", "--out", tmp_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.count(BANNER) == 1
    assert "after RMSNorm with w = 0 (scale 1):     [1.00, 1.00, 1.00]" in out
    assert "4. divide by the RMS        [0.3651, 0.7303, 1.0954, 1.4606]" in out
    assert "bit for bit: True" in out and "matches exactly: True" in out
    assert "gate = +0: output RMS 0.000" in out
    assert "lengths after l2norm: [1.0, 1.0, 1.0]" in out
    assert "17 RMSNorms on the residual stream (8 layers x 2 + the final one), 4 per-head q/k" in out
    assert "6 gated RMSNorms (6 linear-attention layers): 27 in all" in out
    try:
        import matplotlib  # noqa: F401
        assert (tmp_path / "ch03_layer_scales.png").stat().st_size > 10_000
        assert (tmp_path / "ch03_final_norm.png").is_file()
    except ImportError:
        assert "--plot needs matplotlib" in out


def test_ch03_in_chinese(run_script, tiny_path):
    r = run_script("ch03_norm.py", "--model", tiny_path, "--lang", "zh")
    assert r.returncode == 0, r.stderr
    assert "带门的 RMSNorm" in r.stdout and "前置归一化" in r.stdout and "Pre-Norm leaves" not in r.stdout


def test_ch02_on_the_tiny_checkpoint(run_script, tiny_path):
    r = run_script("ch02_embedding.py", "--model", tiny_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.count(BANNER) == 1
    assert "9419 'Hello'" in out and "97169 '毕'" in out and "decode(encode(text)) == text: True" in out
    assert "248,044 BPE tokens + 33 special tokens = 248,077 ids" in out and "(243) belong to no token" in out
    assert "embed(13 ids) -> shape [13, 16]" in out
    assert "ranks #" in out and "top probability" in out


def test_ch02_with_own_text_and_special_tokens(run_script, tiny_path):
    r = run_script("ch02_embedding.py", "--model", tiny_path, "--lang", "zh", "--text", "<|im_start|>你好 world")
    assert r.returncode == 0, r.stderr
    assert "248045 '<|im_start|>'" in r.stdout and "嵌入表" in r.stdout


def test_ch02_lone_surrogate_is_one_clear_line(run_script, tiny_path):
    r = run_script("ch02_embedding.py", "--model", tiny_path, "--text", "a\udc80b",
                   env={"PYTHONIOENCODING": "utf-8:surrogateescape"})
    assert r.returncode == 1 and "Traceback" not in r.stderr and "lone surrogate U+DC80 at position 1" in r.stderr


NOTEBOOK_RUN = r"""
import sys, types, jupytext
sys.modules.setdefault("ipykernel", types.ModuleType("ipykernel"))   # as inside Jupyter
sys.argv = ["ipykernel_launcher.py", "-f", "/tmp/kernel-1234.json"]
nb = jupytext.read({script!r})
namespace = {{"__name__": "__main__"}}
for cell in nb.cells:
    if cell.cell_type == "code":
        exec(compile(cell.source, "cell", "exec"), namespace)
print("CELLS", sum(c.cell_type == "code" for c in nb.cells), sum(c.cell_type == "markdown" for c in nb.cells))
"""


def test_chapters_open_and_run_as_notebooks(run_script, tiny_path):
    """Each chapter read by jupytext as a notebook, its code cells run in order, as Jupyter would."""
    import pytest
    pytest.importorskip("jupytext")
    for script in sorted(ROOT.glob("ch[0-9][0-9]_*.py")):
        r = run_script("-c", NOTEBOOK_RUN.format(script=str(script)), env={"QWEN_MODEL": str(tiny_path)})
        assert r.returncode == 0, (script.name, r.stderr[-2000:])
        cells = r.stdout.rsplit("CELLS", 1)[1].split()
        assert int(cells[0]) >= 5 and int(cells[1]) >= 5 and BANNER in r.stdout, script.name


def test_help_is_in_the_chosen_language(run_script):
    r = run_script("main.py", "--help", "--lang", "zh")
    assert r.returncode == 0 and "章节号" in r.stdout


def test_main_prints_the_banner_once_per_run(run_script):
    r = run_script("main.py", "--tiny")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count(BANNER) == 1 and "(the built-in tiny checkpoint: made-up numbers)" in r.stdout


def test_chapter_api_reads_the_environment(tiny_path, monkeypatch, capsys):
    """Notebook users choose with QWEN_TINY / QWEN_LANG / QWEN_MODEL instead of flags."""
    import qwen.cli as cli
    from qwen.lang import get_lang, set_lang

    monkeypatch.setattr(cli, "_banner_shown", False)
    monkeypatch.setenv("QWEN_TINY", "1")
    monkeypatch.setenv("QWEN_LANG", "zh")
    set_lang(None)
    ch = cli.chapter("Chapter 0: test", "第 0 章：测试", plot=True, argv=[],
                     options={"--text": dict(default="hi", help=("the text", "文字"))})
    assert ch.tiny and ch.path == tiny_path and ch.args.text == "hi" and ch.args.plot is False
    assert get_lang() == "zh" and "norm.weight" in ch.W and ch.tokenizer is not None
    cli.section(2, "Two", "二")
    cli.say("  x = {x}", "  x 等于 {x}", x=3)
    cli.chapter("Chapter 0: test", "第 0 章：测试", argv=["--lang", "en"])     # a second chapter in one run
    out = capsys.readouterr().out
    assert out.count("内置小检查点") == 1 and "第 0 章：测试" in out and "\n2. 二\n" in out and "x 等于 3" in out
    monkeypatch.delenv("QWEN_TINY")
    monkeypatch.setenv("QWEN_MODEL", str(tiny_path))
    assert cli.chapter("c", "c", argv=[]).tiny
