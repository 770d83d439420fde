"""qwen/rope.py against transformers' Qwen3_5TextRotaryEmbedding + apply_rotary_pos_emb, and RoPE's properties."""
import json

import pytest
import torch

from conftest import MANIFEST
from hf_layers import bf16_step, checkpoint, hf_positions
from qwen.rope import RotaryEmbedding, apply_rope, inverse_frequencies, mrope_angles, rope_settings
from qwen.config import Config

G = torch.Generator().manual_seed(4)


def hf_rope():
    return pytest.importorskip("transformers.models.qwen3_5.modeling_qwen3_5")


@pytest.mark.parametrize("layout", ["text", "multimodal"])
def test_cos_sin_match_transformers(layout):
    cfg, _, tm = checkpoint(layout)
    rope = RotaryEmbedding(cfg)
    assert rope.rotary_dim == 8 and rope.theta == 1e7 and rope.mrope_section == [2, 1, 1]
    positions = torch.tensor([[0, 1, 2, 3, 4, 5], [100, 101, 102, 4000, 4001, 262143]])
    x = torch.zeros(2, 6, 64)
    ref_cos, ref_sin = tm.rotary_emb(x, hf_positions(positions))         # (2, 6, 8)
    cos, sin = rope(positions)
    assert cos.shape == (2, 6, 8) and cos.dtype == torch.float32
    assert torch.equal(cos, ref_cos) and torch.equal(sin, ref_sin)       # same fp32 angles, bit for bit
    cos1, sin1 = rope(positions[1])                                      # (seq,) positions
    assert cos1.shape == (6, 8) and torch.equal(cos1, ref_cos[1]) and torch.equal(sin1, ref_sin[1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_apply_rope_matches_transformers(dtype):
    cfg, _, _ = checkpoint("text")
    cos, sin = RotaryEmbedding(cfg)(torch.arange(50))
    q = torch.randn(2, 4, 50, 32, generator=G).to(dtype)
    k = torch.randn(2, 2, 50, 32, generator=G).to(dtype)
    ref_q, ref_k = hf_rope().apply_rotary_pos_emb(q.float(), k.float(), cos[None], sin[None])
    ours_q, ours_k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    assert ours_q.dtype == dtype and ours_q.shape == q.shape
    if dtype == torch.float32:
        torch.testing.assert_close(ours_q, ref_q, rtol=0, atol=1e-6)
        torch.testing.assert_close(ours_k, ref_k, rtol=0, atol=1e-6)
    else:                                                   # rounded once from the fp32 result: 1 step
        for ours, ref in ((ours_q, ref_q), (ours_k, ref_k)):
            assert torch.equal(ours, ref.to(dtype))
        hf_bf16, _ = hf_rope().apply_rotary_pos_emb(q, k, cos[None].to(dtype), sin[None].to(dtype))
        assert (ours_q.float() - hf_bf16.float()).abs().max() <= 2 * bf16_step(ref_q.abs().max().item())
    assert torch.equal(ours_q[..., 8:], q[..., 8:])          # the 24 unrotated entries pass through


def test_batched_cos_sin_rotate_each_sequence_at_its_own_positions():
    cfg, _, _ = checkpoint("text")
    rope = RotaryEmbedding(cfg)
    x = torch.randn(2, 4, 5, 32, generator=G)
    cos, sin = rope(torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]]))
    out = apply_rope(x, cos, sin)
    for b in range(2):
        torch.testing.assert_close(out[b:b + 1], apply_rope(x[b:b + 1], cos[b], sin[b]), rtol=0, atol=0)


def test_text_positions_make_mrope_plain_rope_and_other_positions_match_transformers():
    cfg, _, tm = checkpoint("multimodal")
    rope = RotaryEmbedding(cfg)
    pos = torch.arange(20)[None]                                          # (1, 20)
    text = mrope_angles(pos.expand(3, 1, 20), rope.inv_freq, rope.mrope_section)
    assert torch.equal(text, pos[..., None].float() * rope.inv_freq)     # all streams equal: 1-D RoPE
    thw = torch.stack([pos, pos // 4, pos % 4])                           # (3, 1, 20): an image-like grid
    angles = mrope_angles(thw, rope.inv_freq, rope.mrope_section)
    ref_cos, ref_sin = tm.rotary_emb(torch.zeros(1, 20, 64), thw)
    torch.testing.assert_close(torch.cat((angles, angles), -1).cos(), ref_cos, rtol=0, atol=1e-6)
    assert not torch.allclose(angles, text)                               # ... and there it differs


def test_rotation_keeps_norms_and_scores_depend_only_on_the_offset():
    cfg, _, _ = checkpoint("text")
    rope = RotaryEmbedding(cfg)
    q, k = torch.randn(1, 1, 1, 32, generator=G).double(), torch.randn(1, 1, 1, 32, generator=G).double()

    def at(x, m):
        cos, sin = rope(torch.tensor([m]))
        return apply_rope(x, cos.double(), sin.double())

    torch.testing.assert_close(at(q, 1234).norm(), q.norm())
    scores = [(at(q, m) * at(k, m - 3)).sum().item() for m in (3, 10, 500, 4000)]
    assert max(scores) - min(scores) < 1e-4 * abs(scores[0])             # only m - n = 3 matters
    assert abs((at(q, 10) * at(k, 3)).sum().item() - scores[0]) > 1e-3   # another offset, another score


def test_interleaved_pairs_are_a_different_rotation():
    """The RoPE paper pairs neighbours (2i, 2i+1); the checkpoint pairs i and i + r/2."""
    cfg, _, _ = checkpoint("text")
    cos, sin = RotaryEmbedding(cfg)(torch.arange(8))
    x = torch.randn(1, 1, 8, 32, generator=G)
    r = 8
    pairs = x[..., :r].unflatten(-1, (r // 2, 2))                         # neighbours
    c, s = cos[:, : r // 2, None], sin[:, : r // 2, None]
    turned = torch.stack((pairs[..., 0] * c[..., 0] - pairs[..., 1] * s[..., 0],
                          pairs[..., 1] * c[..., 0] + pairs[..., 0] * s[..., 0]), -1).flatten(-2)
    assert (turned - apply_rope(x, cos, sin)[..., :r]).abs().max() > 0.1


def test_real_config_settings():
    config = json.loads(MANIFEST.read_text(encoding="utf-8"))["config"]
    cfg = Config.from_dict(config)
    rotary_dim, theta, section = rope_settings(cfg)
    assert (rotary_dim, theta, section) == (64, 1e7, [11, 11, 10]) and sum(section) == rotary_dim // 2
    f = inverse_frequencies(rotary_dim, theta)
    assert f.shape == (32,) and f[0] == 1.0 and abs(f[-1].item() / 1e7 ** (-62 / 64) - 1) < 1e-5


def test_older_config_keys():
    """Exports that keep rope_theta / partial_rotary_factor at the top level of text_config."""
    cfg = Config.from_dict({**json.loads(MANIFEST.read_text(encoding="utf-8"))["config"]["text_config"],
                            "rope_parameters": None, "rope_theta": 5e6, "partial_rotary_factor": 0.5})
    assert rope_settings(cfg)[:2] == (128, 5e6)


def test_frequencies_stay_fp32_when_the_model_is_cast():
    cfg, _, _ = checkpoint("text")
    rope = RotaryEmbedding(cfg)
    before = rope(torch.arange(300))
    rope.to(torch.bfloat16)                                  # as load_model(dtype=torch.bfloat16) would
    after = rope(torch.arange(300))
    assert rope.inv_freq.dtype == torch.float32 and all(torch.equal(a, b) for a, b in zip(before, after))
    assert list(rope.state_dict()) == []                     # nothing to load from a checkpoint
