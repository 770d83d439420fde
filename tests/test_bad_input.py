"""Every bad input the loader (engine/checkpoint.py's checks, then qwen/weights.py) meets gives one clear message, and scripts print it without a traceback."""
import json
import shutil

import pytest

from qwen.lang import QwenError, set_lang
from engine.tiny import REAL_SHARD_NAME, write_tiny
from qwen.files import INDEX_NAME
from engine.checkpoint import open_weights
from qwen.weights import load


from engine.hub import find_model
@pytest.fixture
def ckpt(tmp_path):
    return write_tiny(tmp_path / "ckpt")


def shard(ckpt):
    return ckpt / REAL_SHARD_NAME


def break_path_missing(ckpt):
    shutil.rmtree(ckpt)


def break_no_config(ckpt):
    (ckpt / "config.json").unlink()


def break_config_not_json(ckpt):
    (ckpt / "config.json").write_text("{ not json", encoding="utf-8")


def break_config_missing_field(ckpt):
    cfg = json.loads((ckpt / "config.json").read_text(encoding="utf-8"))
    del cfg["text_config"]["num_hidden_layers"]
    (ckpt / "config.json").write_text(json.dumps(cfg), encoding="utf-8")


def break_no_weights(ckpt):
    shard(ckpt).unlink()
    (ckpt / INDEX_NAME).unlink()


def break_index_names_missing_shard(ckpt):
    shard(ckpt).unlink()


def break_truncated(ckpt):
    data = shard(ckpt).read_bytes()
    shard(ckpt).write_bytes(data[: len(data) - 1000])


def break_header_length_beyond_file(ckpt):
    data = shard(ckpt).read_bytes()
    shard(ckpt).write_bytes((10**9).to_bytes(8, "little") + data[8:])


def break_header_not_json(ckpt):
    data = bytearray(shard(ckpt).read_bytes())
    data[8:12] = b"}}{{"
    shard(ckpt).write_bytes(bytes(data))


def break_only_pickle(ckpt):
    break_no_weights(ckpt)
    (ckpt / "pytorch_model.bin").write_bytes(b"\x80\x04not really")


CASES = [  # (how to break it, what the message must say)
    (break_path_missing, "does not exist"),
    (break_no_config, "has no config.json"),
    (break_config_not_json, "is not valid JSON"),
    (break_config_missing_field, "'num_hidden_layers' is missing"),
    (break_no_weights, "has no .safetensors weights"),
    (break_index_names_missing_shard, "lists the shard " + REAL_SHARD_NAME),
    (break_truncated, "it is truncated"),
    (break_header_length_beyond_file, "header claims 1,000,000,000 bytes"),
    (break_header_not_json, "header is not JSON"),
    (break_only_pickle, "only pickle weights (pytorch_model.bin)"),
]


@pytest.mark.parametrize("breaker, message", CASES, ids=[c[0].__name__[6:] for c in CASES])
def test_library_message(ckpt, breaker, message):
    from qwen.config import Config
    breaker(ckpt)
    with pytest.raises(QwenError) as e:
        find_model(ckpt)
        Config.load(ckpt)
        open_weights(ckpt)
    assert message in str(e.value)
    set_lang("zh")
    assert str(e.value) != e.value.en and str(e.value) == e.value.zh and e.value.zh.strip()


@pytest.mark.parametrize("breaker, message", CASES[:2] + CASES[6:8], ids=["path_missing", "no_config",
                                                                           "truncated", "header_length"])
def test_script_prints_one_clear_line_without_traceback(ckpt, breaker, message, run_script):
    breaker(ckpt)
    r = run_script("ch01_weights.py", "--model", ckpt)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr and r.stderr.startswith("Error: ") and message in r.stderr
    assert "--debug" in r.stderr


def test_debug_shows_the_traceback(ckpt, run_script):
    break_truncated(ckpt)
    r = run_script("ch01_weights.py", "--model", ckpt, "--debug")
    assert r.returncode == 1 and "Traceback" in r.stderr and "it is truncated" in r.stderr


def test_unknown_tensor_name_suggests_close_names(ckpt):
    W = open_weights(ckpt)
    with pytest.raises(KeyError) as e:
        W["layers.0.input_layernorm.weigth"]
    assert "Did you mean: layers.0.input_layernorm.weight" in str(e.value)
    assert isinstance(e.value, QwenError)
    assert "layers.0.input_layernorm.weigth" not in W and W.get("nope") is None


def test_shape_mismatch_in_load(ckpt):
    import torch
    with pytest.raises(QwenError, match=r"Shape mismatch for norm\.weight.*\[32\].*\[16\]"):
        load(torch.nn.LayerNorm(32, bias=False), open_weights(ckpt), "norm.")


def test_index_that_lies_about_a_tensor(ckpt):
    index = json.loads((ckpt / INDEX_NAME).read_text(encoding="utf-8"))
    index["weight_map"]["model.language_model.made_up.weight"] = REAL_SHARD_NAME
    (ckpt / INDEX_NAME).write_text(json.dumps(index), encoding="utf-8")
    with pytest.raises(QwenError, match="made_up.weight"):
        open_weights(ckpt)


def test_nothing_is_written_to_a_broken_checkpoint(ckpt):
    break_truncated(ckpt)
    before = {p.name: p.read_bytes() for p in ckpt.iterdir()}
    with pytest.raises(QwenError):
        open_weights(ckpt)
    assert {p.name: p.read_bytes() for p in ckpt.iterdir()} == before


def test_offline_and_not_cached_in_a_script(run_script, tmp_path):
    r = run_script("main.py", "download", env={"HF_HOME": str(tmp_path / "empty")})
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "Could not find Qwen/Qwen3.5-0.8B" in r.stderr and "HF_HUB_OFFLINE" in r.stderr
