"""Small Qwen3.5 checkpoints written by transformers itself, for the layer fidelity tests.

`hf_checkpoint(folder, layout)` builds a two-layer model (linear attention, then full attention)
with transformers' own classes, fills every parameter with seeded random values (norm weights
included, so a forgotten `1 +` shows), saves it with `save_pretrained` in `dtype`, and returns
(folder, the transformers model in that dtype). layout "text" writes Qwen3_5ForCausalLM (keys
`model.layers.*`), "multimodal" Qwen3_5ForConditionalGeneration (keys `model.language_model.*`).
"""
import functools
import os
import tempfile

import pytest
import torch

TEXT = dict(
    vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
    layer_types=["linear_attention", "full_attention"], num_attention_heads=4, num_key_value_heads=2,
    head_dim=32, linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=16,
    linear_value_head_dim=16, linear_conv_kernel_dim=4, rms_norm_eps=1e-6, max_position_embeddings=4096,
    rope_parameters={"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                     "mrope_section": [2, 1, 1], "mrope_interleaved": True},
)
VISION = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=64,
              patch_size=4, num_position_embeddings=16, temporal_patch_size=2, spatial_merge_size=2)


def hf_checkpoint(folder, layout="text", seed=0, dtype=torch.float32):
    transformers = pytest.importorskip("transformers")
    if layout == "text":
        config = transformers.Qwen3_5TextConfig(**TEXT)
        model_class = transformers.Qwen3_5ForCausalLM
    else:
        config = transformers.Qwen3_5Config(text_config=TEXT, vision_config=VISION)
        model_class = transformers.Qwen3_5ForConditionalGeneration
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = model_class(config).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 0.3 if name.endswith("norm.weight") else 1 / p.shape[-1] ** 0.5
            p.copy_(torch.randn(p.shape, generator=g) * scale)
    model.to(dtype).save_pretrained(folder)
    return folder, model


def bf16_step(x):
    """The gap between neighbouring bf16 numbers at the size of x (a positive float)."""
    import math
    return 2.0 ** (math.floor(math.log2(x)) - 7)


def hf_positions(positions):
    """Position ids for transformers' Qwen3_5TextRotaryEmbedding: (batch, seq) -> (3, batch, seq),
    one row per mrope axis (all three equal for text). transformers 5.17 indexes them as 3-D and
    fails on (batch, seq); 5.24 expands (batch, seq) itself. Both accept this (run against both)."""
    return positions.expand(3, *positions.shape)


def text_model(model):
    """The Qwen3_5TextModel inside either layout."""
    inner = model.model
    return getattr(inner, "language_model", inner)


@functools.lru_cache(maxsize=None)
def checkpoint(layout="text", dtype=torch.float32):
    """(Config, lazy weights, transformers' Qwen3_5TextModel) of a checkpoint written once per session."""
    from qwen.config import Config
    from qwen.weights import load_weights
    folder, model = hf_checkpoint(tempfile.mkdtemp(prefix=f"hf-{layout}-", dir=os.environ.get("TBH_TEST_TMP")),
                                  layout, dtype=dtype)                    # removed with the session's folder
    return Config.load(folder), load_weights(folder), text_model(model)


def causal_mask(T, past=0):
    """The additive mask transformers' eager attention takes: (1, 1, T, past + T), -inf above the diagonal."""
    return torch.full((T, past + T), float("-inf")).triu(past + 1)[None, None]
