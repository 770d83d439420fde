"""Config: both config.json layouts, derived layer types, and clear errors."""
import json

import pytest

from conftest import MANIFEST
from qwen.lang import QwenError
from engine.tiny import tiny_config
from qwen.config import Config

REAL = json.loads(MANIFEST.read_text(encoding="utf-8"))["config"]


def write(tmp_path, body):
    (tmp_path / "config.json").write_text(body if isinstance(body, str) else json.dumps(body), encoding="utf-8")
    return tmp_path


def test_real_multimodal_layout(tmp_path):
    cfg = Config.load(write(tmp_path, REAL))
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size) == (1024, 24, 3584)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (8, 2, 256)
    assert (cfg.linear_num_key_heads, cfg.linear_num_value_heads) == (16, 16)
    assert (cfg.linear_key_head_dim, cfg.linear_value_head_dim, cfg.linear_conv_kernel_dim) == (128, 128, 4)
    assert cfg.rms_norm_eps == 1e-6 and cfg.vocab_size == 248320 and cfg.tie_word_embeddings is True
    assert cfg.full_attention_layers == [3, 7, 11, 15, 19, 23]
    assert len(cfg.linear_attention_layers) == 18


def test_flat_text_only_layout_gives_the_same_numbers(tmp_path):
    flat = {"architectures": ["Qwen3_5ForCausalLM"], **REAL["text_config"]}
    a, b = Config.load(write(tmp_path, flat)), Config.from_dict(REAL)
    assert a == b


def test_tiny_config_in_both_layouts_agree():
    assert Config.from_dict(tiny_config("text")) == Config.from_dict(tiny_config("multimodal"))


def test_layer_types_derived_from_interval_when_absent():
    text = {k: v for k, v in REAL["text_config"].items() if k != "layer_types"}
    cfg = Config.from_dict({"text_config": text})
    assert cfg.layer_types == Config.from_dict(REAL).layer_types
    text["full_attention_interval"] = 3
    assert Config.from_dict({"text_config": text}).full_attention_layers == [2, 5, 8, 11, 14, 17, 20, 23]


def test_accepts_the_config_file_itself(tmp_path):
    assert Config.load(write(tmp_path, REAL) / "config.json").hidden_size == 1024


@pytest.mark.parametrize("field", ["hidden_size", "rms_norm_eps", "vocab_size", "head_dim"])
def test_missing_field_names_the_field_and_file(tmp_path, field):
    text = dict(REAL["text_config"])
    del text[field]
    with pytest.raises(QwenError) as e:
        Config.load(write(tmp_path, {**REAL, "text_config": text}))
    assert repr(field) in str(e.value) and "config.json" in str(e.value)


@pytest.mark.parametrize("field, value", [("hidden_size", "1024"), ("num_hidden_layers", True),
                                          ("rms_norm_eps", "tiny"), ("head_dim", -1),
                                          ("layer_types", ["full_attention"]),
                                          ("tie_word_embeddings", "yes")])
def test_ill_typed_field_is_named(tmp_path, field, value):
    with pytest.raises(QwenError) as e:
        Config.load(write(tmp_path, {**REAL, "text_config": {**REAL["text_config"], field: value}}))
    assert repr(field) in str(e.value) and "should be" in str(e.value)


def test_not_json(tmp_path):
    with pytest.raises(QwenError, match=r"config\.json is not valid JSON"):
        Config.load(write(tmp_path, '{"text_config": {"hidden_size": 1024,'))


def test_folder_without_config(tmp_path):
    with pytest.raises(QwenError, match="has no config.json"):
        Config.load(tmp_path)


def test_missing_path(tmp_path):
    with pytest.raises(QwenError, match="does not exist"):
        Config.load(tmp_path / "nowhere")


def test_messages_exist_in_chinese(tmp_path):
    from qwen.lang import set_lang
    set_lang("zh")
    with pytest.raises(QwenError) as e:
        Config.load(tmp_path)
    assert "没有 config.json" in str(e.value)
