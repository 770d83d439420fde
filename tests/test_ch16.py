"""Chapter 16 run as a learner runs it: its printed numbers hold (--tiny), it speaks Chinese, and on a
checkpoint that is not the tiny one (transformers-written, text-only layout) it prints sample replies
and exports the merged model."""
import re

import pytest

from helpers import chinese_text_problems

pytestmark = pytest.mark.timeout(180)
STEPS = "10"                                        # fewer than the default 16: the claims are the same


def number(pattern, out):
    found = re.search(pattern, out)
    assert found, pattern
    return [float(g) for g in found.groups()] if len(found.groups()) > 1 else float(found[1])


def test_chapter_16_prints_what_it_computes(run_script, tmp_path, tiny_path):
    r = run_script("ch16_lora.py", "--tiny", "--steps", STEPS, "--run", str(tmp_path / "run"))
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "Traceback" not in r.stderr
    # the adapters: what is counted is what add_lora puts on the tiny model
    import torch
    from qwen.lora import add_lora, trainable
    from qwen.model import load_model
    expected = trainable(add_lora(load_model(tiny_path, vision=False), r=8, alpha=16))
    k, t, n = re.search(r"(\d+) projections wrapped, rank 8, alpha 16: ([\d,]+) trainable parameters of ([\d,]+)",
                        out).groups()
    assert int(k) == 50 and (int(t.replace(",", "")), int(n.replace(",", ""))) == expected
    assert number(r"step 0 against the base model: max \|logit difference\| = (\S+)\n", out) == 0.0
    # the loss at the replies' positions is next_token_loss's
    a, b = number(r"its loss ([\d.]+), next_token_loss over all ([\d.]+)", out)
    assert abs(a - b) < 1e-4
    before, after, held_before, held_after = number(
        STEPS + r" steps at lr 1e-03: training loss ([\d.]+) -> ([\d.]+); held-out ([\d.]+) -> ([\d.]+)", out)
    assert after < before - 0.1 and held_after < held_before
    assert "random weights; the loss still falls" in out and "before:" not in out
    moments = number(r"AdamW's moments: ([\d,]+) bytes", out.replace(",", ""))
    assert moments == 8 * expected[0]                                  # two fp32 moments, adapters only
    qv_layers, qv_loss = number(r"q_proj, v_proj: +[\d,]+ trainable, in (\d) of 8 layers; training loss after "
                                + STEPS + r" steps ([\d.]+)", out)
    assert qv_layers == 2 and "in 8 of 8 layers" in out and qv_loss > after
    # the adapter, saved, reloaded, refused where it does not fit
    adapter = tmp_path / "run" / "adapter"
    assert (adapter / "adapter_config.json").is_file() and (adapter / "adapter_model.safetensors").is_file()
    assert number(r"loaded into a fresh model: max \|logit difference\| from the adapted model = (\S+)\n", out) <= 1e-5
    assert re.search(r"into a rank-4 model: .*has a rank-4 adapter, .* is rank 8", out)
    assert re.search(r"into another model: .*has shape \[8, 16\], this model needs \[8, 32\]", out)
    assert out.count("the model unchanged: True") == 2
    # merged, exported, reloaded
    assert number(r"merged in fp32: 0 LoRA tensors left; max \|logit difference\| from the adapted model = (\S+)\n",
                  out) <= 1e-4
    gap, top = number(r"\(bf16\) and reloaded: max \|logit difference\| = ([\d.]+) \(logits up to ([\d.]+)\)", out)
    assert 0 < gap < 0.05 * top                                        # bf16 rounding, no more
    exported, adapted, base = number(r"exported model: ([\d.]+) \(adapted: ([\d.]+), base: ([\d.]+)\)", out)
    assert abs(exported - adapted) < 0.01 < base - adapted
    from safetensors import safe_open
    merged = tmp_path / "run" / "merged"
    with safe_open(str(next(merged.glob("*.safetensors"))), "pt") as f:
        names = list(f.keys())
        dtype = f.get_tensor("model.layers.0.mlp.down_proj.weight").dtype
    assert names and not any("lora_" in n for n in names) and dtype == torch.bfloat16   # the checkpoint's names


def test_chapter_16_in_chinese_on_a_checkpoint_written_by_transformers(run_script, tmp_path, transformers_checkpoints):
    """In Chinese, and not on the tiny checkpoint: the sample replies before and after, labelled as not the
    published model's; a flat (text-only) config is exported as it is."""
    r = run_script("ch16_lora.py", "--model", str(transformers_checkpoints["text-bf16-tied"]), "--steps", "1",
                   "--lang", "zh", "--run", str(tmp_path / "run"))
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "第 16 章" in out and "微调" in out and "适配器" in out and "Fine-tuning" not in out
    assert not chinese_text_problems(out), chinese_text_problems(out)[:5]
    assert "\n    微调前：'" in out and "\n    微调后：'" in out and "不能确认是公开发布的 Qwen3.5-0.8B" in out
    assert "权重是随机的；损失照样下降" not in out
    assert number(r"第 0 步与原模型相比：logits 的最大差 = (\S+)\n", out) == 0.0
    assert number(r"加载到新模型里：与微调后模型的 logits 最大差 = (\S+)\n", out) <= 1e-5
    assert (tmp_path / "run" / "merged" / "config.json").is_file()


def test_chapter_16_refuses_bad_options_in_one_line(run_script):
    r = run_script("ch16_lora.py", "--tiny", "--steps", "0")
    assert r.returncode == 1 and "--steps must be at least 1" in r.stderr and "Traceback" not in r.stderr


def test_the_instruction_pairs_and_a_bad_file(tmp_path):
    from engine.instructions import read_pairs
    from qwen.lang import QwenError
    pairs = read_pairs()
    assert len(pairs) == 36 and sum(p["reply"].startswith("In one line: ") for p in pairs) == 18
    assert sum(p["reply"].startswith("一句话：") for p in pairs) == 18
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "hi", "reply": "hello"}\n{"prompt": "no reply"}\n', encoding="utf-8")
    with pytest.raises(QwenError, match="line 2"):
        read_pairs(bad)


def test_chapter_16_refuses_a_run_folder_that_is_a_file_before_computing(run_script, tmp_path):
    file = tmp_path / "run"
    file.write_text("mine", encoding="utf-8")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "adapter").write_text("mine too", encoding="utf-8")
    for run, named in ((file, file), (tmp_path / "folder", tmp_path / "folder" / "adapter")):
        r = run_script("ch16_lora.py", "--tiny", "--steps", "1", "--run", str(run))
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
        line = r.stderr.strip().splitlines()[0]                         # the message; then where --debug helps
        assert line.startswith("Error: --run: Cannot write into ") and f"{named} is a file" in line, r.stderr
        assert "instruction" not in r.stdout.lower()                      # refused before anything is computed
    assert file.read_text(encoding="utf-8") == "mine"
    assert (tmp_path / "folder" / "adapter").read_text(encoding="utf-8") == "mine too"
