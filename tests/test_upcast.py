"""qwen/upcast.py: a bf16 model whose long-prompt projections run in fp32 gives the plain bf16 model's numbers."""
import torch

from qwen import upcast


def test_upcast_linear_rounds_once_like_bf16s_own_matmul():
    g = torch.Generator().manual_seed(0)
    linear = torch.nn.Linear(256, 64, bias=False).to(torch.bfloat16)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(64, 256, generator=g) * 0.05)
    wrapped = upcast.UpcastLinear(linear, min_rows=8)
    for rows in (1, 8, 40):
        x = torch.randn(1, rows, 256, generator=g).to(torch.bfloat16)
        want = (x.float() @ linear.weight.float().T).to(torch.bfloat16)    # fp32, then one rounding
        got = wrapped(x)
        assert got.dtype == torch.bfloat16 and got.shape == (1, rows, 64)
        steps = (got.float() - want.float()).abs() / want.float().abs().clamp_min(1e-3)
        assert steps.max() <= 2 ** -7                                    # at most a bf16 step apart
        if rows >= 8:
            assert torch.equal(got, want)                                # the fp32 path itself
    assert wrapped.weight is linear.weight and wrapped.in_features == 256


def test_upcast_prompts_keeps_the_bf16_models_logits(tiny_path):
    from qwen.model import load_model
    plain = load_model(tiny_path, dtype=torch.bfloat16, vision=False)
    fast = upcast.upcast_prompts(load_model(tiny_path, dtype=torch.bfloat16, vision=False), min_rows=16)
    assert sum(isinstance(m, upcast.UpcastLinear) for m in fast.modules()) == \
        sum(isinstance(m, torch.nn.Linear) for m in plain.layers.modules())
    ids = torch.tensor([list(range(100, 140))])                          # 40 tokens: the fp32 path
    a, b = plain(ids), fast(ids)
    assert (a - b).abs().max() <= 0.05 * a.abs().max()                   # bf16 roundings, in another order
    assert (a.argmax(-1) == b.argmax(-1)).float().mean() > 0.9
    one = torch.tensor([[7]])                                            # one token: the plain bf16 path
    assert torch.equal(plain(one), fast(one))
    fp32 = upcast.upcast_prompts(load_model(tiny_path, vision=False))
    assert not any(isinstance(m, upcast.UpcastLinear) for m in fp32.modules())   # nothing to do in fp32
