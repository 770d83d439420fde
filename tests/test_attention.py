"""qwen/attention.py against transformers' Qwen3_5Attention (eager, causal mask), on checkpoints
transformers wrote; the cache path against a full recompute; the core against SDPA."""

import pytest
import torch
import torch.nn.functional as F

from conftest import REAL_MODEL
from hf_layers import bf16_step, causal_mask, checkpoint, hf_positions
from qwen.attention import Attention, causal_attention
from qwen.cache import ROOM, Cache, LayerCache
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
    ref, _ = tm.layers[1].self_attn(x, tm.rotary_emb(x, hf_positions(positions[None].expand(2, -1))), causal_mask(T))
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
    ref, _ = tm.layers[1].self_attn(x, tm.rotary_emb(x, hf_positions(positions[None])), causal_mask(T).bfloat16())
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
    cache = LayerCache()
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
    cache = LayerCache()
    attn(x, cos, sin, cache=cache)
    ref = tm.layers[1].self_attn
    k = ref.k_norm(ref.k_proj(x).view(1, 5, 2, 32)).transpose(1, 2)
    from qwen.rope import apply_rope
    torch.testing.assert_close(cache.k, apply_rope(k, cos, sin), rtol=0, atol=1e-6)
    torch.testing.assert_close(cache.v, ref.v_proj(x).view(1, 5, 2, 32).transpose(1, 2), rtol=0, atol=1e-6)


def test_bf16_cache_holds_the_bf16_keys_in_fp32_and_attends_in_fp32():
    """With bf16 weights the cache keeps k and v in fp32 (exactly the bf16-rounded values) and the
    attention runs in fp32: in bf16 every new key count is a new oneDNN matmul shape, which oneDNN
    keeps (+1.2 MB per generated token, measured)."""
    cfg, W, tm = checkpoint("text", torch.bfloat16)
    attn = layer(cfg, W)
    x = torch.randn(1, 5, 64, generator=G).bfloat16()
    cos, sin = RotaryEmbedding(cfg)(torch.arange(5))
    cache = LayerCache()
    out = attn(x, cos, sin, cache=cache)
    assert out.dtype == torch.bfloat16 and cache.k.dtype == cache.v.dtype == torch.float32
    from qwen.rope import apply_rope
    ref = tm.layers[1].self_attn
    k = apply_rope(ref.k_norm(ref.k_proj(x).view(1, 5, 2, 32)).transpose(1, 2), cos, sin)
    assert k.dtype == torch.bfloat16 and torch.equal(cache.k, k.float())
    assert torch.equal(cache.v, ref.v_proj(x).view(1, 5, 2, 32).transpose(1, 2).float())


def test_update_equals_concatenation_across_its_buffer_sizes():
    """Keys written 1, 200, then 1 at a time past 256 and 512 tokens: always what torch.cat would
    hold; the buffer is replaced only when full."""
    gen = torch.Generator().manual_seed(1)
    cache, ks, vs, moves = LayerCache(), [], [], 0
    for T in [1, 200] + [1] * 330:
        k, v = torch.randn(2, 2, T, 4, generator=gen), torch.randn(2, 2, T, 4, generator=gen)
        before = None if cache.k_buffer is None else cache.k_buffer.data_ptr()
        ks.append(k), vs.append(v)
        got_k, got_v = cache.update(k, v)
        moves += before is not None and cache.k_buffer.data_ptr() != before
        assert torch.equal(got_k, torch.cat(ks, 2)) and torch.equal(got_v, torch.cat(vs, 2))
        assert cache.k_buffer.shape[2] % ROOM == 0 and cache.length == got_k.shape[2]
    assert moves == 2                                            # at 256 and 512 tokens


def test_rollback_by_position_writes_over_the_later_keys():
    """length set back to 10: the next keys are written at position 10, as if the later ones were never read."""
    gen = torch.Generator().manual_seed(2)
    cache = LayerCache()
    k, v = torch.randn(1, 2, 12, 4, generator=gen), torch.randn(1, 2, 12, 4, generator=gen)
    cache.update(k, v)
    cache.length = 10
    k1, v1 = torch.randn(1, 2, 1, 4, generator=gen), torch.randn(1, 2, 1, 4, generator=gen)
    got_k, got_v = cache.update(k1, v1)
    assert torch.equal(got_k, torch.cat([k[:, :, :10], k1], 2)) and torch.equal(got_v, torch.cat([v[:, :, :10], v1], 2))


def test_a_copy_of_the_cache_and_the_original_continue_apart():
    """Cache.copy (a chat's kept point): continuing the copy and the original gives each what torch.cat would."""
    gen = torch.Generator().manual_seed(3)
    kv = lambda T=1: (torch.randn(1, 2, T, 4, generator=gen), torch.randn(1, 2, T, 4, generator=gen))  # noqa: E731
    cache = Cache(1)
    k0, v0 = kv(5)
    cache[0].update(k0, v0)
    other = cache.copy()
    (k1, v1), (k2, v2) = kv(), kv()
    other[0].update(k1, v1)
    cache[0].update(k2, v2)
    assert torch.equal(other[0].k, torch.cat([k0, k1], 2)) and torch.equal(cache[0].k, torch.cat([k0, k2], 2))
    assert torch.equal(other[0].v, torch.cat([v0, v1], 2)) and torch.equal(cache[0].v, torch.cat([v0, v2], 2))


def test_gradients_through_the_cache_equal_the_full_run():
    """Backward through a prefill and two single tokens read with a cache gives the gradients of one
    run over the whole sequence (the buffers must not change keys autograd kept for backward)."""
    cfg, W, _ = checkpoint("text")
    attn = layer(cfg, W, block=8)
    rope = RotaryEmbedding(cfg)
    x = torch.randn(1, 7, 64, generator=G)
    weight = torch.randn(1, 7, 64, generator=G)
    grads = []
    for steps in ([(0, 7)], [(0, 5), (5, 6), (6, 7)]):
        attn.zero_grad()
        xs = x.clone().requires_grad_()
        cache = LayerCache()
        with torch.enable_grad():
            for p in attn.parameters():
                p.requires_grad_(True)
            out = torch.cat([attn(xs[:, a:b], *rope(torch.arange(a, b)), cache=cache) for a, b in steps], 1)
            (out * weight).sum().backward()
        grads.append([xs.grad, attn.k_proj.weight.grad, attn.v_proj.weight.grad])
    for got, ref in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)


def test_a_call_with_another_batch_size_is_one_clear_line_and_leaves_the_cache_alone():
    cfg, W, _ = checkpoint("text")
    attn = layer(cfg, W)
    rope = RotaryEmbedding(cfg)
    cache = LayerCache()
    with torch.no_grad():
        attn(torch.randn(2, 5, 64, generator=G), *rope(torch.arange(5)), cache=cache)
        kept = cache.k.clone()
        for B in (1, 3):
            with pytest.raises(ShapeError, match=r"holds keys/values of shape \[2, 2, 5, 32\].*new cache"):
                attn(torch.randn(B, 1, 64, generator=G), *rope(torch.tensor([5])), cache=cache)
    assert torch.equal(cache.k, kept)


def test_update_continues_outside_inference_mode_a_cache_made_inside_it():
    """generate_ids runs under torch.inference_mode, so its cache's buffers are inference tensors;
    continuing that cache by hand (a cell after chapter 9's reply) gets buffers of its own."""
    gen = torch.Generator().manual_seed(3)
    kv = lambda T: (torch.randn(1, 2, T, 4, generator=gen), torch.randn(1, 2, T, 4, generator=gen))
    cache = LayerCache()
    with torch.inference_mode():
        k0, v0 = kv(5)
        cache.update(k0, v0)
    k1, v1 = kv(1)
    with torch.no_grad():
        got_k, got_v = cache.update(k1, v1)
        k2, v2 = kv(1)
        got_k, got_v = cache.update(k2, v2)                   # and on, in its own (normal) buffers
    assert torch.equal(got_k, torch.cat([k0, k1, k2], 2)) and torch.equal(got_v, torch.cat([v0, v1, v2], 2))
    assert not cache.k_buffer.is_inference()


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


@pytest.mark.real_model
@pytest.mark.skipif(REAL_MODEL is None, reason="the real Qwen/Qwen3.5-0.8B is not on disk "
                    "(set QWEN_MODEL, or run python main.py download)")
def test_the_first_full_attention_layer_of_the_real_model_matches_transformers():
    """Layer 3 of Qwen3.5-0.8B as stored (bf16): attention, MLP and RoPE against transformers' modules."""
    transformers = pytest.importorskip("transformers")
    from qwen.mlp import MLP
    from qwen.config import Config
    from qwen.weights import load_weights
    from transformers.models.qwen3_5 import modeling_qwen3_5 as hf

    cfg, W = Config.load(REAL_MODEL), load_weights(REAL_MODEL)
    text = dict(cfg.raw.get("text_config", cfg.raw))
    hf_cfg = transformers.Qwen3_5TextConfig(**{k: v for k, v in text.items() if k not in ("model_type", "dtype")})
    hf_cfg._attn_implementation = "eager"
    L = cfg.full_attention_layers[0]
    ref_attn = hf.Qwen3_5Attention(hf_cfg, L).to(torch.bfloat16).eval()
    ref_attn.load_state_dict({n: W[f"layers.{L}.self_attn.{n}"] for n in ref_attn.state_dict()})
    ref_mlp = hf.Qwen3_5MLP(hf_cfg, cfg.intermediate_size).to(torch.bfloat16).eval()
    ref_mlp.load_state_dict({n: W[f"layers.{L}.mlp.{n}"] for n in ref_mlp.state_dict()})
    T = 40
    x = (torch.randn(1, T, cfg.hidden_size, generator=G) * 0.5).bfloat16()
    positions = torch.arange(T)
    ref_cos, ref_sin = hf.Qwen3_5TextRotaryEmbedding(hf_cfg)(x.float(), hf_positions(positions[None]))
    cos, sin = RotaryEmbedding(cfg)(positions)
    assert torch.equal(cos, ref_cos[0]) and torch.equal(sin, ref_sin[0])
    with torch.no_grad():
        ref = ref_attn(x, (ref_cos.bfloat16(), ref_sin.bfloat16()), causal_mask(T).bfloat16())[0]
        out = load(Attention(cfg), W, f"layers.{L}.self_attn.")(x, cos, sin)
        assert (out.float() - ref.float()).abs().max() <= 2 * bf16_step(ref.float().abs().max().item())
        mlp_ref = ref_mlp(x)
        mlp_out = load(MLP(cfg.hidden_size, cfg.intermediate_size), W, f"layers.{L}.mlp.")(x)
        assert (mlp_out.float() - mlp_ref.float()).abs().max() <= 2 * bf16_step(mlp_ref.float().abs().max().item())
