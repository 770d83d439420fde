"""qwen/norm.py against float64 formulas written here, and against transformers' Qwen3.5 modules."""
import json

import pytest
import torch
import torch.nn.functional as F

from conftest import MANIFEST
from qwen.lang import QwenError
from qwen.model import model_norms
from qwen.norm import GatedRMSNorm, RMSNorm, ShapeError, l2norm
from engine.tiny import write_checkpoint
from qwen.config import Config
from qwen.weights import load, load_weights

G = torch.Generator().manual_seed(1234)


def randn(*shape, scale=1.0, dtype=torch.float32):
    return (torch.randn(*shape, generator=G) * scale).to(dtype)


# ---------------------------------------------------------------- float64 formulas, written out

def rmsnorm64(x, w, eps):
    x = x.double()
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) / x.shape[-1] + eps) * (1 + w.double())


def gated64(x, w, gate, eps):
    x, gate = x.double(), gate.double()
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) / x.shape[-1] + eps) * w.double() * gate / (1 + torch.exp(-gate))


def l2norm64(x, eps):
    x = x.double()
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def with_weight(module, w):
    module.weight.data = w.clone()
    return module


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2), (torch.float16, 2e-3)])
@pytest.mark.parametrize("shape", [(1024,), (3, 1024), (2, 5, 1024)])
def test_rmsnorm_matches_the_formula(dtype, tol, shape):
    x, w = randn(*shape, scale=3, dtype=dtype), randn(1024, scale=0.3, dtype=torch.bfloat16)
    y = with_weight(RMSNorm(1024), w)(x)
    assert y.dtype == dtype and y.shape == x.shape
    torch.testing.assert_close(y.double(), rmsnorm64(x, w, 1e-6), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_gated_matches_the_formula(dtype, tol):
    x, gate = randn(4, 16, 128, dtype=dtype), randn(4, 16, 128, scale=3, dtype=dtype)
    w = 0.5 + torch.rand(128, generator=G)
    y = with_weight(GatedRMSNorm(128), w)(x, gate)
    assert y.dtype == dtype
    torch.testing.assert_close(y.double(), gated64(x, w, gate, 1e-6), rtol=tol, atol=tol)


def test_l2norm_matches_the_formula_and_puts_eps_in_the_sum():
    x = randn(6, 128)
    torch.testing.assert_close(l2norm(x).double(), l2norm64(x, 1e-6), rtol=1e-6, atol=1e-7)
    small = torch.full((4,), 1e-4)                         # |x|^2 = 4e-8, eps dominates
    assert l2norm(small).norm().item() == pytest.approx((4e-8 / (4e-8 + 1e-6)) ** 0.5, rel=1e-5)


def test_initial_weights():
    assert torch.equal(RMSNorm(8).weight, torch.zeros(8)) and torch.equal(GatedRMSNorm(8).weight, torch.ones(8))
    x = randn(3, 8)
    torch.testing.assert_close(RMSNorm(8)(x).pow(2).mean(-1), torch.ones(3))


def test_missing_one_plus_or_swapped_norms_are_caught_by_the_formula(tiny_path):
    """The tiny checkpoint's weights are drawn so that these mistakes are visible."""
    W = load_weights(tiny_path)
    x = randn(2, 16, scale=4)
    good = load(RMSNorm(16), W, "layers.0.input_layernorm.")(x)
    w = W["layers.0.input_layernorm.weight"]
    without_one = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float())
    swapped = load(RMSNorm(16), W, "layers.0.post_attention_layernorm.")(x)
    assert (good - without_one).abs().max() > 0.5 and (good - swapped).abs().max() > 0.3


def test_statistics_are_fp32_even_for_fp16_inputs_that_would_overflow():
    x = torch.full((2, 1024), 300.0, dtype=torch.float16)   # 300^2 = 90000 > fp16 max 65504
    y = RMSNorm(1024)(x)
    assert y.dtype == torch.float16 and torch.isfinite(y).all()
    torch.testing.assert_close(y.float(), torch.ones(2, 1024))


def test_large_magnitudes_and_zero_vectors():
    x = torch.tensor([[1e18, -1e18, 1e18, 1e18], [0.0, 0.0, 0.0, 0.0]])   # 1e36 still fits in fp32
    y = RMSNorm(4)(x)
    torch.testing.assert_close(y[0], torch.tensor([1.0, -1.0, 1.0, 1.0]))
    assert torch.equal(y[1], torch.zeros(4))                 # eps keeps the root above 0: no NaN
    assert torch.equal(l2norm(torch.zeros(3, 4)), torch.zeros(3, 4))
    assert torch.equal(GatedRMSNorm(4)(torch.zeros(1, 4), torch.ones(1, 4)), torch.zeros(1, 4))


def test_nan_and_inf_behave_as_documented():
    x = torch.tensor([[1.0, float("nan"), 2.0, 3.0], [1.0, float("inf"), 2.0, 3.0], [1.0, 2.0, 3.0, 4.0]])
    y = RMSNorm(4)(x)
    assert torch.isnan(y[0]).all()                           # NaN anywhere: the whole vector is NaN
    assert torch.isnan(y[1, 1]) and torch.equal(y[1, [0, 2, 3]], torch.zeros(3))   # inf: RMS is inf
    assert torch.isfinite(y[2]).all()                        # other vectors are unaffected


def test_non_contiguous_and_batched_inputs():
    x = randn(1024, 6).t()                                   # (6, 1024), not contiguous
    w = randn(1024, scale=0.2)
    y = with_weight(RMSNorm(1024), w)(x)
    torch.testing.assert_close(y, with_weight(RMSNorm(1024), w)(x.contiguous()), rtol=1e-6, atol=1e-6)
    xb = randn(2, 3, 4, 256, dtype=torch.bfloat16)[..., ::2]            # strided last dimension
    torch.testing.assert_close(RMSNorm(128)(xb).float(), RMSNorm(128)(xb.contiguous()).float(), rtol=0, atol=0.02)


def test_inputs_are_not_modified():
    x = randn(3, 64)
    before = x.clone()
    RMSNorm(64)(x), l2norm(x), GatedRMSNorm(64)(x, x)
    assert torch.equal(x, before)


def test_f_rms_norm_is_the_same_computation():
    x, w = randn(4, 1024, scale=2), randn(1024, scale=0.3, dtype=torch.bfloat16)
    ours = with_weight(RMSNorm(1024), w)
    assert torch.equal(F.rms_norm(x, (1024,), weight=1 + w.float(), eps=1e-6), ours(x))
    xb = x.bfloat16()
    rounded = F.rms_norm(xb, (1024,), weight=1 + w, eps=1e-6)   # 1 + w rounded to bf16 first
    assert 0.05 < (rounded != ours(xb)).float().mean().item() < 0.6


# ---------------------------------------------------------------- bad input

def test_wrong_last_dimension_is_a_clear_error():
    with pytest.raises(ShapeError, match=r"RMSNorm\(1024\) normalizes vectors of length 1024.*\[2, 512\]"):
        RMSNorm(1024)(torch.zeros(2, 512))
    with pytest.raises(ShapeError, match=r"GatedRMSNorm\(128\)"):
        GatedRMSNorm(128)(torch.zeros(2, 64), torch.zeros(2, 64))


def test_gate_shape_must_match():
    with pytest.raises(ShapeError, match=r"gate has shape \[4, 1\] but x has shape \[4, 128\]"):
        GatedRMSNorm(128)(torch.zeros(4, 128), torch.zeros(4, 1))


def test_weight_of_the_wrong_size_names_the_key(tiny_path):
    with pytest.raises(QwenError, match=r"layers\.0\.linear_attn\.norm\.weight.*expects \[128\].*has \[8\]"):
        load(GatedRMSNorm(128), load_weights(tiny_path), "layers.0.linear_attn.norm.")


# ---------------------------------------------------------------- every norm of the model

def test_model_norms_on_the_tiny_checkpoint(tiny_path):
    cfg, W = Config.load(tiny_path), load_weights(tiny_path)
    norms = model_norms(cfg, W)
    kinds = [type(m).__name__ + ("/qk" if "self_attn" in k else "") for k, m in norms.items()]
    assert (kinds.count("RMSNorm"), kinds.count("RMSNorm/qk"), kinds.count("GatedRMSNorm")) == (17, 4, 6)
    for prefix, m in norms.items():
        assert torch.equal(m.weight.detach(), W[prefix + ".weight"])


def test_model_norm_counts_come_from_the_config(tiny_path):
    raw = json.loads((tiny_path / "config.json").read_text(encoding="utf-8"))
    raw["text_config"]["num_hidden_layers"] = 4
    raw["text_config"]["layer_types"] = raw["text_config"]["layer_types"][:4]
    norms = model_norms(Config.from_dict(raw), load_weights(tiny_path))
    assert len(norms) == 4 * 2 + 1 + 2 + 3


def test_model_norms_of_the_real_08b_inventory(tmp_path):
    """The norm tensors of the real checkpoint (names, shapes, dtypes from the manifest): 49 + 12 + 18."""
    manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
    dt = {"BF16": torch.bfloat16, "F32": torch.float32}
    tensors = {n: torch.zeros(t["shape"], dtype=dt[t["dtype"]]) for n, t in manifest["tensors"].items()
               if n.startswith("model.language_model.") and n.split(".")[-2].endswith("norm")}
    write_checkpoint(tmp_path, tensors, manifest["config"])
    norms = model_norms(Config.load(tmp_path), load_weights(tmp_path))
    residual = [k for k, m in norms.items() if isinstance(m, RMSNorm) and "self_attn" not in k]
    qk = [k for k in norms if "self_attn" in k]
    gated = [k for k, m in norms.items() if isinstance(m, GatedRMSNorm)]
    assert (len(residual), len(qk), len(gated)) == (49, 12, 18)
    assert norms["layers.0.linear_attn.norm"].weight.dtype == torch.float32


# ---------------------------------------------------------------- transformers, the reference

@pytest.fixture(scope="module")
def hf():
    return pytest.importorskip("transformers.models.qwen3_5.modeling_qwen3_5")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rmsnorm_is_bit_identical_to_transformers(hf, dtype):
    for shape in [(1024,), (7, 1024), (2, 3, 1024)]:
        x, w = randn(*shape, scale=4, dtype=dtype), randn(1024, scale=0.4, dtype=torch.bfloat16)
        theirs = with_weight(hf.Qwen3_5RMSNorm(1024, eps=1e-6), w)
        assert torch.equal(with_weight(RMSNorm(1024), w)(x), theirs(x))
    q = randn(2, 5, 8, 256, dtype=dtype)                    # per head, as q_norm / k_norm are used
    w = randn(256, scale=0.4, dtype=torch.bfloat16)
    assert torch.equal(with_weight(RMSNorm(256), w)(q), with_weight(hf.Qwen3_5RMSNorm(256), w)(q))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_l2norm_is_bit_identical_to_transformers(hf, dtype):
    x = randn(2, 7, 16, 128, dtype=dtype)
    assert torch.equal(l2norm(x), hf.l2norm(x, dim=-1, eps=1e-6))


def test_gated_rmsnorm_against_transformers(hf):
    w = 0.5 + torch.rand(128, generator=G)                  # fp32, as stored in the real checkpoint
    ours, theirs = with_weight(GatedRMSNorm(128), w), with_weight(hf.Qwen3_5RMSNormGated(128, eps=1e-6), w)
    x, gate = randn(3, 16, 128, scale=2), randn(3, 16, 128, scale=3)
    assert torch.equal(ours(x, gate), theirs(x, gate))      # fp32: bit for bit
    xb, gb = x.bfloat16(), gate.bfloat16()
    a, b = ours(xb, gb), theirs(xb, gb)
    ulps = (a.view(torch.int16).int() - b.view(torch.int16).int()).abs()
    assert ulps.max().item() <= 2 and (ulps > 0).any()      # they round an intermediate; we round once


def test_norm_module_depends_on_torch_only():
    import ast
    from conftest import ROOT
    tree = ast.parse((ROOT / "qwen" / "norm.py").read_text(encoding="utf-8"))
    roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    roots |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert roots == {"torch"}


def test_shape_errors_carry_both_languages():
    with pytest.raises(ShapeError) as e:
        RMSNorm(8)(torch.zeros(2, 4))
    assert isinstance(e.value, ValueError) and "RMSNorm(8)" in e.value.en and "归一化长度为 8 的向量" in e.value.zh


def test_on_cpu_layer_norm_is_one_kernel_and_rms_norm_several_ops():
    """ch03 says so: fewer reductions is not speed by itself."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    x, w = torch.randn(4, 16), torch.ones(16)
    with Ops() as rms_ops:
        F.rms_norm(x, (16,), weight=w, eps=1e-6)
    with Ops() as ln_ops:
        F.layer_norm(x, (16,), eps=1e-6)
    assert ln_ops.names == ["native_layer_norm"] and len(rms_ops.names) == 6 and "rsqrt" in rms_ops.names
