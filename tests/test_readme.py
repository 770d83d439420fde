"""The README's Python blocks run as written (against the built-in tiny checkpoint)."""
import re

from conftest import ROOT


def test_readme_python_blocks_run(tiny_path, monkeypatch, tmp_path, capsys):
    """Each block on its own, in a fresh namespace, as a learner pastes it into a new notebook: with
    QWEN_TINY=1 it needs no real model, and none leans on a name another block defines (such as `path`)."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) >= 2 and any("load_weights" in b for b in blocks)
    monkeypatch.setenv("QWEN_TINY", "1")                           # the blocks set these: restored afterwards
    monkeypatch.setenv("QWEN_LANG", "")
    monkeypatch.delenv("QWEN_MODEL", raising=False)
    monkeypatch.setenv("QWEN_PROGRESS", str(tmp_path / "progress.json"))   # check() records progress
    from helpers import run_as_a_cell
    spaces = [run_as_a_cell(block, f"<README block {i}>", {}) for i, block in enumerate(blocks)]
    namespace = next(s for s in spaces if "norms" in s)
    assert len(namespace["norms"]) == 27 and namespace["tok"].encode("Hello!") == [9419, 0]
    assert list(namespace["scores"].shape) == [1, 248320]
    assert any("model" in s and s["cache"].length > 0 for s in spaces)    # the chapters 8-9 block generated
    assert "1 +" in capsys.readouterr().out                        # the judge names the README's mistake
    import torch                                                   # the dtypes the README states for
    stated = next(line for b in blocks for line in b.splitlines() if "la.rule_inputs(x)" in line)   # rule_inputs
    x = namespace["emb"](namespace["tok"].encode("Hi there"))[None]
    q, k, v, g, beta = namespace["la"].rule_inputs(x)
    assert {t.dtype for t in (q, k, g, beta)} == {torch.float32} and v.dtype == x.dtype == torch.bfloat16
    assert "fp32 but v (x's dtype)" in stated


def test_readme_lists_the_chapters_that_exist_and_what_comes_next():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for script in sorted(ROOT.glob("ch[0-9][0-9]_*.py")):
        assert f"`{script.name}`" in text, script.name
    assert "install the CPU build of PyTorch first" in text
    import json                                                      # the counts it gives are the checkpoint's
    counts = json.loads((ROOT / "bench" / "qwen3.5-0.8b-manifest.json").read_text(encoding="utf-8"))["counts"]["tensors"]
    assert (f"every one of the checkpoint's {counts['total']} tensors is used by code you can read, the language\n"
            f"model's {counts['language_model']} in chapters 1-9, the vision tower's {counts['visual']} in chapters 10-11 "
            f"and the MTP head's {counts['mtp']} in chapter 12") in text
    assert text.index("pip install torch --index-url") < text.index("pip install -e . && python main.py")
    assert "QWEN_TINY=1" in text and "QWEN_LANG=zh" in text and "1.75 GB, once" not in text


def test_readme_lists_every_benchmark():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for script in sorted((ROOT / "bench").glob("bench_*.py")):
        assert f"python bench/{script.name}" in text, script.name


def test_readme_names_each_chapters_own_options():
    """A learner finds a chapter's options in its row of the README's table: chapter 9's --dtype (the
    only way to bf16), --quant, --speculative and --temperature, chapter 8's --no-reference, chapter 12's
    --max-new-tokens and every other one. Read from each script's `chapter(..., options={...})`."""
    import ast
    import re
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = {int(m[1]): m[0] for m in re.finditer(r"^\| (\d+) \| `ch\d\d_\w+\.py` \|.*$", text, re.M)}
    missing = {}
    for script in sorted(ROOT.glob("ch[0-9][0-9]_*.py")):
        for node in ast.walk(ast.parse(script.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "chapter":
                options = [kw.value for kw in node.keywords if kw.arg == "options"]
                names = [k.value for o in options for k in o.keys] if options else []
                row = rows[int(script.name[2:4])]
                missing.update({script.name: [n for n in names if f"`{n}" not in row]} if names else {})
    assert rows and not {k: v for k, v in missing.items() if v}, missing


def test_readme_practice_block_runs_outside_the_repository(tmp_path):
    """The README's check() block, pasted into a notebook started in another folder with the course
    installed (`pip install -e .` puts only `qwen` on the path): `from practice import check` works there,
    with no ModuleNotFoundError. Run in a fresh Python whose path has the course's qwen and not its root."""
    import os
    import subprocess
    import sys
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), flags=re.S)
    block = next(b for b in blocks if "check(" in b and "import check" in b)
    site = tmp_path / "site"
    site.mkdir()
    (site / "qwen").symlink_to(ROOT / "qwen", target_is_directory=True)    # what the install makes importable
    work = tmp_path / "notebooks"
    work.mkdir()
    cell = "import linecache\nsource = " + repr(block) + "\n" \
           "linecache.cache['<cell>'] = (len(source), None, source.splitlines(True), '<cell>')\n" \
           "exec(compile(source, '<cell>', 'exec'), {})\n"                 # as a notebook cell: getsource finds it
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(site), QWEN_TINY="1", QWEN_LANG="en", PYTHONIOENCODING="utf-8",
               QWEN_PROGRESS=str(tmp_path / "progress.json"))
    r = subprocess.run([sys.executable, "-c", cell], cwd=work, env=env, capture_output=True, text=True,
                       encoding="utf-8", timeout=110)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "1 +" in r.stdout                                       # the judge ran and named the mistake

