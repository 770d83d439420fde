"""qwen/mlp.py against transformers' Qwen3_5MLP, on checkpoints transformers wrote."""
import pytest
import torch
import torch.nn.functional as F

from hf_layers import bf16_step, checkpoint
from qwen.lang import QwenError
from qwen.mlp import MLP
from qwen.weights import load

G = torch.Generator().manual_seed(5)


@pytest.mark.parametrize("layout", ["text", "multimodal"])
@pytest.mark.parametrize("layer", [0, 1])
def test_mlp_matches_transformers_fp32(layout, layer):
    cfg, W, tm = checkpoint(layout)
    mlp = load(MLP(cfg.hidden_size, cfg.intermediate_size), W, f"layers.{layer}.mlp.")
    x = torch.randn(2, 7, 64, generator=G)
    ref = tm.layers[layer].mlp(x)
    out = mlp(x)
    assert out.shape == x.shape and out.dtype == torch.float32
    assert (out - ref).abs().max() <= 1e-5 * ref.abs().max()


@pytest.mark.parametrize("layout", ["text", "multimodal"])
def test_mlp_matches_transformers_bf16(layout):
    cfg, W, tm = checkpoint(layout, torch.bfloat16)
    mlp = load(MLP(cfg.hidden_size, cfg.intermediate_size), W, "layers.1.mlp.")
    assert mlp.up_proj.weight.dtype == torch.bfloat16                 # weights as stored
    x = torch.randn(3, 5, 64, generator=G).bfloat16()
    ref = tm.layers[1].mlp(x)
    out = mlp(x)
    assert out.dtype == torch.bfloat16
    assert (out.float() - ref.float()).abs().max() <= 2 * bf16_step(ref.float().abs().max().item())


def test_mlp_is_the_swiglu_formula_in_float64():
    cfg, W, _ = checkpoint("text")
    mlp = load(MLP(cfg.hidden_size, cfg.intermediate_size), W, "layers.0.mlp.")
    x = torch.randn(4, 64, generator=G)
    g, u, d = (W[f"layers.0.mlp.{n}_proj.weight"].double() for n in ("gate", "up", "down"))
    z = x.double() @ g.T
    expected = (z * torch.sigmoid(z) * (x.double() @ u.T)) @ d.T
    torch.testing.assert_close(mlp(x).double(), expected, rtol=1e-5, atol=1e-5)
    wrong = (F.silu(x.double() @ u.T) * z) @ d.T                       # silu on the up projection
    assert (wrong - expected).abs().max() > 0.1


def test_fp32_input_on_bf16_weights_computes_in_bf16_and_returns_fp32():
    cfg, W, _ = checkpoint("text", torch.bfloat16)
    mlp = load(MLP(cfg.hidden_size, cfg.intermediate_size), W, "layers.0.mlp.")
    x = torch.randn(2, 64, generator=G)
    out = mlp(x)
    assert out.dtype == torch.float32 and torch.equal(out, mlp(x.bfloat16()).float())


def test_wrong_size_names_the_key():
    _, W, _ = checkpoint("text")
    with pytest.raises(QwenError, match=r"layers\.0\.mlp\.gate_proj\.weight.*expects \[128, 64\].*has \[96, 64\]"):
        load(MLP(64, 128), W, "layers.0.mlp.")
