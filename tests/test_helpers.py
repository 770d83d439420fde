"""The test helper writes the layouts it promises (other tests rely on them)."""
import torch

from helpers import write_transformers_checkpoint
from qwen.weights import Config, load_weights


def test_transformers_checkpoints_have_the_promised_layouts(tmp_path):
    flat = load_weights(write_transformers_checkpoint(tmp_path / "flat", "text", torch.float32, tied=False))
    assert "model.layers.0.input_layernorm.weight" in flat.all_names and "lm_head.weight" in flat.all_names
    assert flat.dtype("layers.3.self_attn.q_norm.weight") == torch.float32
    multi = write_transformers_checkpoint(tmp_path / "multi", "multimodal", torch.float32, tied=False)
    names = load_weights(multi).all_names
    assert "model.language_model.norm.weight" in names and any(n.startswith("model.visual.") for n in names)
    assert "text_config" in Config.load(multi).raw
    tied = write_transformers_checkpoint(tmp_path / "tied", "text", torch.bfloat16, tied=True)
    W = load_weights(tied)
    assert "lm_head.weight" not in W.all_names and W.dtype("embed_tokens.weight") == torch.bfloat16
    assert Config.load(tied).tie_word_embeddings is True
