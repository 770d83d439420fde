"""A NaN or an infinity in a checkpoint's weights is one line at load, naming the file and the tensor.

Without it, text, vision and MTP checkpoints with a NaN would run every chapter to "Done" printing `nan`
differences, and the judge would pass the reference "on the model's tensors" when they are NaN."""
import shutil

import pytest
import torch

from qwen.lang import QwenError, set_lang

FILE = "model.safetensors-00001-of-00001.safetensors"


def _broken_checkpoint(folder, key, index, value):
    """The built-in tiny checkpoint's tensors, with tensors[key][index] = value."""
    from engine.tiny import tiny_config, tiny_tensors, write_checkpoint
    tensors = tiny_tensors()
    tensors[key] = tensors[key].clone()
    tensors[key][index] = value
    return write_checkpoint(folder, tensors, tiny_config())


@pytest.mark.parametrize("key, index, value", [
    ("model.language_model.layers.0.input_layernorm.weight", (5,), float("nan")),
    ("model.language_model.embed_tokens.weight", (300, 2), float("inf")),
    ("model.visual.blocks.0.attn.qkv.weight", (1, 3), float("nan")),
    ("mtp.fc.weight", (2, 7), float("-inf")),
])
@pytest.mark.parametrize("dtype", [torch.float32, None])
def test_a_nan_or_inf_weight_stops_load_model_with_one_line_naming_it(tmp_path, key, index, value, dtype):
    from qwen.model import load_model
    from qwen.mtp import load_head
    folder = _broken_checkpoint(tmp_path / "ck", key, index, value)
    with pytest.raises(QwenError) as e:
        model = load_model(folder, dtype=dtype)                         # fp32 (converted) and as stored (mapped)
        load_head(model)                                                # the MTP head is loaded by qwen/mtp.py
    where = list(index)
    assert e.value.en.startswith(f"{folder / FILE}: {key}{where} is {value}: "), e.value.en
    assert e.value.zh.startswith(f"{folder / FILE}：{key}{where} 是 {value}：") and "\n" not in e.value.zh
    set_lang("en")


def test_a_nan_weight_fails_the_judge_instead_of_passing_the_reference(tmp_path, monkeypatch):
    """Exercise 204 builds its cases from layers.0.input_layernorm.weight: with a NaN there, the judge
    fails the file, so the reference cannot pass by comparing NaN equal to NaN."""
    import practice.judge as judge
    from practice._judge.exercises import BY_ID
    monkeypatch.setenv("QWEN_PRACTICE_DIR", str(tmp_path / "work"))
    monkeypatch.setenv("QWEN_PROGRESS", str(tmp_path / "progress.json"))
    key = "model.language_model.layers.0.input_layernorm.weight"
    folder = _broken_checkpoint(tmp_path / "ck", key, (5,), float("nan"))
    ex = BY_ID["204"]
    mine = tmp_path / "mine.py"
    shutil.copy(ex.solution, mine)
    with pytest.raises(QwenError, match=rf"^{folder / FILE}: {key}\[5\] is nan"):
        judge.grade(ex, mine, folder)


def test_rows_of_a_table_are_checked_too(tmp_path):
    from qwen.weights import load_weights
    folder = _broken_checkpoint(tmp_path / "ck", "model.language_model.embed_tokens.weight", (300, 2), float("nan"))
    W = load_weights(folder)
    assert torch.isfinite(W.rows("embed_tokens.weight", [0, 299, 301]).float()).all()     # the good rows
    with pytest.raises(QwenError, match=r"embed_tokens\.weight\[300, 2\] is nan"):
        W.rows("embed_tokens.weight", [1, 300])
