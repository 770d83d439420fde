"""On the real Qwen/Qwen3.5-0.8B: the course's printed figures come out the same.

Skipped unless the real checkpoint is on disk. Run: QWEN_MODEL=/path/to/Qwen3.5-0.8B python -m pytest -m real_model
(or with the model downloaded by `python main.py download` into the default Hugging Face cache).
"""
import pytest
import torch

from conftest import REAL_MODEL

pytestmark = [pytest.mark.real_model,
              pytest.mark.skipif(REAL_MODEL is None, reason="the real Qwen/Qwen3.5-0.8B is not on disk "
                                 "(set QWEN_MODEL, or run python main.py download)")]


def test_the_loader_reads_the_real_file():
    from qwen.config import Config
    from qwen.weights import load_weights
    W, cfg = load_weights(REAL_MODEL), Config.load(REAL_MODEL)
    assert len(W.all_names) == 488 and len(W) == 320
    assert sum(W.info(n).numel for n in W) == 752_393_024
    assert W.dtype("layers.0.linear_attn.A_log") == torch.float32 and cfg.hidden_size == 1024


def test_chapter_3_figures(run_script):
    r = run_script("ch03_norm.py", "--model", REAL_MODEL)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "RMS of three input vectors:            [5.14, 5.05, 4.84]" in out
    assert "after layer 0's input norm: [1.24, 1.24, 1.25]    after the final norm: [4.33, 4.32, 4.34]" in out
    assert "stored w: mean +0.238, range [-0.11, +1.00]" in out
    assert "stored w: mean +3.309, range [-0.78, +5.31]" in out
    assert "gate = -6: output RMS 0.014" in out and "gate = +0: output RMS 0.000" in out
    assert "gate = +6: output RMS 5.730" in out
    assert "49 RMSNorms on the residual stream" in out and "12 per-head q/k" in out and "18 gated" in out


def test_chapter_1_on_the_real_model(run_script):
    r = run_script("ch01_weights.py", "--model", REAL_MODEL)
    assert r.returncode == 0, r.stderr
    assert "320 tensors, 752,393,024 parameters" in r.stdout and "BUILT-IN TINY" not in r.stdout


@torch.inference_mode()
def test_the_real_model_replies_in_fluent_text_in_the_prompts_language():
    """Greedy replies to fixed prompts: they end with <|im_end|>, decode without replacement
    characters, hold no special token, and are written in the prompt's language."""
    import re
    from qwen.generate import generate
    from qwen.model import load_model
    from qwen.tokenizer import Tokenizer
    model, tok = load_model(REAL_MODEL, dtype=torch.bfloat16), Tokenizer.load(REAL_MODEL)
    special = set(tok.special)
    for prompt, script in (("What is the capital of France? Answer in one sentence.", r"[A-Za-z]"),
                           ("法国的首都是哪里？请用一句话回答。", r"[\u4e00-\u9fff]")):
        stats, ids = {}, []
        reply = "".join(generate(model, tok, prompt, max_new_tokens=64, stats=stats, ids_out=ids))
        assert stats["stopped"] and ids[-1] == tok.special["<|im_end|>"], reply
        assert "\ufffd" not in reply and not any(s in reply for s in special), reply
        assert len(re.findall(script, reply)) >= 0.5 * len(re.sub(r"\W", "", reply)) > 0, reply
        assert "Paris" in reply or "巴黎" in reply, reply
