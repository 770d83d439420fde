"""qwen/attention.py against transformers' Qwen3_5Attention (eager, causal mask), on checkpoints
transformers wrote; the cache path against a full recompute; the core against SDPA."""
import types

import pytest
import torch
import torch.nn.functional as F

from hf_layers import bf16_step, causal_mask, checkpoint
from qwen.attention import Attention, causal_attention
from qwen.norm import ShapeError
from qwen.rope import RotaryEmbedding
from qwen.weights import load

G = torch.Generator().manual_seed(6)


def layer(cfg, W, block=128):
    return load(Attention(cfg, block=block), W, "layers.1.self_attn.")


@pytest.mark.parametrize("layout", ["text", "multimodal"])
@pytest.mark.parametrize("block", [128, 16])                      # one block; several, the last one short
def test_attention_matches_transformers_fp32(layout, block):
    cfg, W, tm = checkpoint(layout)
    T = 40
    x = torch.randn(2, T, 64, generator=G)
    positions = torch.arange(T)
    cos, sin = RotaryEmbedding(cfg)(positions)
    ref, _ = tm.layers[1].self_attn(x, tm.rotary_emb(x, positions[None].expand(2, -1)), causal_mask(T))
    out = layer(cfg, W, block)(x, cos, sin)
    assert out.shape == x.shape and out.dtype == torch.float32
    assert (out - ref).abs().max() <= 1e-5 * ref.abs().max()


@pytest.mark.parametrize("layout", ["text", "multimodal"])
def test_attention_matches_transformers_bf16(layout):
    cfg, W, tm = checkpoint(layout, torch.bfloat16)
    attn = layer(cfg, W, block=16)
    assert attn.q_proj.weight.dtype == torch.bfloat16
    T = 33
    x = torch.randn(1, T, 64, generator=G).bfloat16()
    positions = torch.arange(T)
    ref, _ = tm.layers[1].self_attn(x, tm.rotary_emb(x, positions[None]), causal_mask(T).bfloat16())
    out = attn(x, *RotaryEmbedding(cfg)(positions))
    assert out.dtype == torch.bfloat16
    assert (out.float() - ref.float()).abs().max() <= 2 * bf16_step(ref.float().abs().max().item())


def test_cache_prefill_then_tokens_equals_full_recompute():
    cfg, W, _ = checkpoint("text")
    attn = layer(cfg, W, block=8)
    rope = RotaryEmbedding(cfg)
    T = 23
    x = torch.randn(2, T, 64, generator=G)
    full = attn(x, *rope(torch.arange(T)))
    cache = types.SimpleNamespace(k=None, v=None)
    parts = [attn(x[:, :20], *rope(torch.arange(20)), cache=cache)]          # prefill
    parts.append(attn(x[:, 20:21], *rope(torch.tensor([20])), cache=cache))  # one token
    parts.append(attn(x[:, 21:], *rope(torch.arange(21, T)), cache=cache))    # two at once
    assert cache.k.shape == cache.v.shape == (2, 2, T, 32)
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=0, atol=1e-5 * full.abs().max().item())


def test_cache_holds_keys_after_k_norm_and_rope():
    cfg, W, tm = checkpoint("text")
    attn = layer(cfg, W)
    x = torch.randn(1, 5, 64, generator=G)
    cos, sin = RotaryEmbedding(cfg)(torch.arange(5))
    cache = types.SimpleNamespace(k=None, v=None)
    attn(x, cos, sin, cache=cache)
    ref = tm.layers[1].self_attn
    k = ref.k_norm(ref.k_proj(x).view(1, 5, 2, 32)).transpose(1, 2)
    from qwen.rope import apply_rope
    torch.testing.assert_close(cache.k, apply_rope(k, cos, sin), rtol=0, atol=1e-6)
    torch.testing.assert_close(cache.v, ref.v_proj(x).view(1, 5, 2, 32).transpose(1, 2), rtol=0, atol=1e-6)


@pytest.mark.parametrize("past", [0, 5])
def test_core_equals_sdpa_and_reads_kv_head_h_over_group(past):
    T, S = 12, 12 + past
    q = torch.randn(2, 8, T, 16, generator=G)
    k, v = torch.randn(2, 2, S, 16, generator=G), torch.randn(2, 2, S, 16, generator=G)
    allowed = torch.ones(T, S, dtype=torch.bool).tril(past)                    # query t sees keys <= past + t
    ref = F.scaled_dot_product_attention(q, k.repeat_interleave(4, 1), v.repeat_interleave(4, 1),
                                         attn_mask=allowed)
    for block in (128, 5):
        out = causal_attention(q, k, v, 16 ** -0.5, past, block)
        torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)
    wrong_order = F.scaled_dot_product_attention(q, k.repeat(1, 4, 1, 1), v.repeat(1, 4, 1, 1), attn_mask=allowed)
    assert (wrong_order - ref).abs().max() > 0.1                               # heads 0,1,2,3 share kv head 0


def test_bad_shapes_are_one_clear_line():
    cfg, W, _ = checkpoint("text")
    attn = layer(cfg, W)
    cos, sin = RotaryEmbedding(cfg)(torch.arange(4))
    with pytest.raises(ShapeError, match=r"x of shape \(batch, seq, 64\), got \[4, 64\]"):
        attn(torch.zeros(4, 64), cos, sin)
    with pytest.raises(ShapeError, match=r"cos/sin hold 4 positions but x has 3 tokens"):
        attn(torch.zeros(1, 3, 64), cos, sin)


def test_inputs_are_not_modified():
    cfg, W, _ = checkpoint("text")
    x = torch.randn(1, 6, 64, generator=G)
    before = x.clone()
    layer(cfg, W)(x, *RotaryEmbedding(cfg)(torch.arange(6)))
    assert torch.equal(x, before)
