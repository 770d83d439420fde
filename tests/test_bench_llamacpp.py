"""bench/bench_llamacpp.py without llama.cpp: the skip line, the table and the goals from given numbers,
the converter found in an sdist and the folder and command prepared for it.

Nothing here needs llama-cpp-python or its build: the course's environment does not have it."""
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import bench_llamacpp as bench  # noqa: E402


def _row(prefill_s, decode_ms, rss_mb, rounds_ms=None):
    return dict(prefill_s=prefill_s, decode_ms=decode_ms, rss_mb=rss_mb, rounds_ms=rounds_ms or [decode_ms])


ROWS = {"ours-fp32": _row(4.2, 200.0, 3200.0), "llama-f32": _row(5.5, 116.0, 3100.0),
        "ours-bf16": _row(4.8, 60.0, 1800.0), "llama-bf16": _row(5.6, 69.0, 1700.0),
        "ours-int8": _row(4.0, 48.0, 950.0), "llama-q8_0": _row(5.3, 45.0, 1000.0)}


@pytest.mark.parametrize("lang, words", [("en", ("pip install llama-cpp-python", "15-25 minutes", "Skipped")),
                                         ("zh", ("pip install llama-cpp-python", "15-25 分钟", "已跳过"))])
def test_without_llama_cpp_one_line_and_exit_0(tmp_path, lang, words):
    """llama_cpp made unimportable (None in sys.modules), whatever this environment has: the bench says how
    to get it in one line and exits 0, before it writes any checkpoint (a TMPDIR of its own stays empty)."""
    code = ("import runpy, sys; sys.modules['llama_cpp'] = None; sys.argv = ['bench_llamacpp.py']; "
            f"runpy.run_path({str(ROOT / 'bench' / 'bench_llamacpp.py')!r}, run_name='__main__')")
    env = {**os.environ, "QWEN_LANG": lang, "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and len(done.stdout.splitlines()) == 1, done.stdout
    assert all(w in done.stdout for w in words) and '".[bench]"' in done.stdout
    assert list(tmp_path.iterdir()) == []


def test_skip_line_is_bilingual_from_one_source():
    from qwen.lang import speaking
    with speaking("zh"):
        zh = bench.skip_line()
    assert "llama-cpp-python" in zh and "，" in zh and zh != bench.skip_line()


def test_goal_lines_from_given_numbers():
    lines = {g[0]: bench.goal_line(g, ROWS) for g in bench.GOALS}
    assert lines["fp32 decode"] == ("fp32 decode: ours fp32 5.00 tokens/s / llama.cpp f32 8.62 tokens/s = 0.58 "
                                    "(goal >= 0.9): missed", False)
    assert lines["bf16 decode"] == ("bf16 decode: ours bf16 16.67 tokens/s / llama.cpp bf16 14.49 tokens/s = 1.15 "
                                    "(goal >= 0.9): met", True)
    assert lines["int8 decode"][1] is True                        # 45 / 48 = 0.94: within 0.9x
    rss = 950 * 2**20 / 1e9, 1000 * 2**20 / 1e9
    assert lines["int8 peak RSS"] == (f"int8 peak RSS: ours int8 {rss[0]:.2f} GB / llama.cpp q8_0 {rss[1]:.2f} GB "
                                      f"= 0.95 (goal <= 1.0): met", True)
    assert lines["bf16 prefill"] == ("bf16 prefill: ours bf16 4.80 s / ours fp32 4.20 s = 1.14 (goal <= 1.3): met", True)
    assert lines["int4 decode"] == ("int4 decode: not measured (ours-int4, llama-q4_k_m left out)", None)
    slow = {**ROWS, "ours-bf16": _row(27.2, 114.0, 1800.0)}       # a slow bf16 prompt pass: 6.5x
    assert bench.goal_line(bench.GOALS[-1], slow) == (
        "bf16 prefill: ours bf16 27.20 s / ours fp32 4.20 s = 6.48 (goal <= 1.3): missed", False)


def test_every_goal_of_the_issue_is_checked():
    pairs = {(kind, ours, theirs, limit) for _, kind, ours, theirs, limit in bench.GOALS}
    assert pairs == {("decode", "ours-fp32", "llama-f32", 0.9), ("decode", "ours-bf16", "llama-bf16", 0.9),
                     ("decode", "ours-int8", "llama-q8_0", 0.9), ("decode", "ours-int4", "llama-q4_k_m", 0.9),
                     ("rss", "ours-int8", "llama-q8_0", 1.0), ("rss", "ours-int4", "llama-q4_k_m", 1.0),
                     ("prefill", "ours-bf16", "ours-fp32", 1.3)}
    assert set(bench.TABLE_ORDER) == set(bench.CONTENDERS) and len(bench.CONTENDERS) == 10


def test_table_from_given_numbers():
    rows = {"llama-f32": _row(5.5, 116.0, 3100.0, [116.0, 118.4, 112.0]), "ours-fp32": _row(4.2, 200.0, 3000.0)}
    lines = bench.table_lines(rows, 512, 64)
    assert lines[0].startswith("| | prefill 512 (s) | decode (ms / token) | decode (tokens/s) | peak RSS (GB) |")
    assert lines[1].startswith("|---|")
    assert lines[2] == f"| ours fp32 | 4.20 | 200.0 | 5.00 | {3000 * 2**20 / 1e9:.2f} | 200 |"    # TABLE_ORDER, not input order
    assert lines[3] == f"| llama.cpp f32 | 5.50 | 116.0 | 8.62 | {3100 * 2**20 / 1e9:.2f} | 116 / 118 / 112 |"
    assert len(lines) == 4


def test_summary_takes_medians_and_the_largest_rss():
    runs = [(dict(prefill_s=5.0, steps_ms=[100, 300, 120]), 900.0),      # median step 120
            (dict(prefill_s=4.0, steps_ms=[90, 95, 400, 99]), 1100.0),   # 97
            (dict(prefill_s=9.0, steps_ms=[130, 131, 129]), 1000.0)]     # 130
    assert bench.summarize(runs) == dict(prefill_s=5.0, decode_ms=120, rss_mb=1100.0, rounds_ms=[120, 97, 130])


def test_prompt_ids_are_the_same_for_all_and_below_the_special_tokens():
    from engine.tiny import FIRST_SPECIAL_ID
    ids = bench.prompt_ids(512)
    assert ids == bench.prompt_ids(512) and len(ids) == 512 and len(set(ids)) > 400
    assert 0 <= min(ids) and max(ids) < bench.ID_LIMIT <= FIRST_SPECIAL_ID
    assert bench.prompt_ids(16, seed=9) != ids[:16]                     # the warm-up prompt is not its prefix


def _sdist(folder, version="9.9.9"):
    """A stand-in for llama-cpp-python's sdist: the converter at its place inside."""
    top = folder / f"llama_cpp_python-{version}"
    (top / "vendor" / "llama.cpp").mkdir(parents=True)
    (top / bench.CONVERTER).write_text("# convert_hf_to_gguf\n", encoding="utf-8")
    archive = folder / f"llama_cpp_python-{version}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(top, arcname=top.name)
    return top, archive


def test_the_converter_comes_from_the_sdist(tmp_path):
    top, archive = _sdist(tmp_path / "src")
    work = tmp_path / "work"
    work.mkdir()
    found = bench.find_converter(archive, work)
    assert found == work / "llama_cpp_python-9.9.9" / bench.CONVERTER and found.read_text(encoding="utf-8")
    found.write_text("# kept\n", encoding="utf-8")
    assert bench.find_converter(archive, work).read_text(encoding="utf-8") == "# kept\n"   # extracted once
    assert bench.find_converter(top, work) == top / bench.CONVERTER                        # an extracted folder
    assert bench.find_converter(top.parent, work) == top / bench.CONVERTER                 # or the one above it
    for wrong in (tmp_path / "missing.tar.gz", work / "llama_cpp_python-9.9.9" / "vendor"):
        with pytest.raises(SystemExit, match="--sdist"):
            bench.find_converter(wrong, work)


def test_the_sdist_download_matches_the_installed_version(tmp_path):
    argv = bench.sdist_download_argv("0.3.36", tmp_path)
    assert argv[:3] == [sys.executable, "-m", "pip"] and "download" in argv and "llama-cpp-python==0.3.36" in argv
    assert argv[argv.index("--no-binary") + 1] == ":all:" and "--no-deps" in argv and str(tmp_path) in argv


def test_converter_folder_links_the_weights_and_adds_the_tokenizer(tmp_path):
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps({"architectures": ["Qwen3_5ForConditionalGeneration"]}),
                                            encoding="utf-8")
    (checkpoint / "model.safetensors").write_bytes(b"weights")
    before = sorted(p.name for p in checkpoint.iterdir())
    folder = bench.converter_folder(checkpoint, tmp_path / "for-converter")
    assert (folder / "model.safetensors").is_symlink() and (folder / "model.safetensors").read_bytes() == b"weights"
    assert json.loads((folder / "config.json").read_text(encoding="utf-8"))["architectures"]
    vocab = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    assert len(vocab) >= 248044                                          # the real vocabulary
    assert json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))["eos_token"] == "<|im_end|>"
    assert sorted(p.name for p in checkpoint.iterdir()) == before        # the checkpoint is left as it was


def test_converter_command(tmp_path):
    argv = bench.converter_argv(tmp_path / "convert_hf_to_gguf.py", tmp_path / "model", tmp_path / "x.gguf.part",
                                "bf16")
    assert argv[:3] == [sys.executable, str(tmp_path / "convert_hf_to_gguf.py"), str(tmp_path / "model")]
    assert argv[argv.index("--outtype") + 1] == "bf16" and argv[argv.index("--outfile") + 1] == str(tmp_path / "x.gguf.part")
    assert "--no-mtp" in argv                                            # our decoding does not load the MTP block


def test_only_selects_contenders_in_round_order():
    assert bench.selected("llama-f32, ours-fp32") == ["ours-fp32", "llama-f32"]
    assert bench.selected(None) == list(bench.CONTENDERS)
    with pytest.raises(SystemExit, match="--only: unknown ours-fp8"):
        bench.selected("ours-fp8")


def test_learner_env_has_no_pinned_allocator():
    learner, pinned = bench.child_env(2, pinned=False), bench.child_env(3, pinned=True)
    assert not any(k.startswith("MALLOC_") for k in learner) and learner["OMP_NUM_THREADS"] == "2"
    assert pinned["MALLOC_MMAP_THRESHOLD_"] == "1048576" and pinned["OMP_NUM_THREADS"] == "3"


def test_gguf_plan_converts_only_what_is_missing():
    assert bench.gguf_plan(["f32", "bf16", "q8_0", "q4_k_m"], set()) == (["f32", "bf16"], ["q8_0", "q4_k_m"])
    assert bench.gguf_plan(["q8_0"], set()) == (["bf16"], ["q8_0"])                # quantized from the bf16 file
    assert bench.gguf_plan(["q8_0"], {"bf16"}) == ([], ["q8_0"])
    assert bench.gguf_plan(["f32", "q4_k_m"], {"f32", "q4_k_m"}) == ([], [])     # a second run converts nothing
    assert bench.gguf_plan([], set()) == ([], [])


def test_rounds_alternate_and_ctrl_c_prints_what_was_measured(monkeypatch, capsys, tmp_path):
    """compare() with the children replaced: contenders alternate within each round, and a Ctrl-C during the
    third run still prints the table and the goals of the two runs done."""
    calls = []

    def fake_child(args, env):
        calls.append((args[0], args[args.index("--variant") + 1]))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return dict(prefill_s=4.0, steps_ms=[100.0, 110.0, 120.0]), 1000.0

    monkeypatch.setattr(bench, "run_child", fake_child)
    monkeypatch.setattr(bench, "gguf_files", lambda *a: {v: tmp_path / f"{v}.gguf" for v in ("f32", "bf16", "q8_0", "q4_k_m")})
    args = type("Args", (), dict(sdist=None, threads=2, pinned=False))()
    keys = bench.selected("ours-fp32,llama-f32")
    assert bench.compare(tmp_path, tmp_path, args, keys, {}, 16, 4, 2) == 0            # 110 / 110: met
    assert calls == [("ours", "float32"), ("llama", "f32"), ("ours", "float32")]      # round 2 began with ours
    out = capsys.readouterr().out
    assert "interrupted: 2 of 4 runs done" in out and "| llama.cpp f32 | 4.00 | 110.0 |" in out
    assert "fp32 decode: ours fp32 9.09 tokens/s / llama.cpp f32 9.09 tokens/s = 1.00 (goal >= 0.9): met" in out
