"""engine/upcast.py: a long bf16 input's products computed in fp32 and rounded once are bf16's own to a
rounding step; only such calls are taken (through engine/products.py's kernel), and a model read inside
`fast()` gives the plain bf16 model's logits to bf16 rounding."""
import pytest
import torch
import torch.nn.functional as F

from engine import packed, products, upcast
from qwen import linear as seam


def _bf16_weight(out_f, in_f, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(out_f, in_f, generator=g) * 0.05).to(torch.bfloat16)


@pytest.fixture
def emulated(monkeypatch):
    monkeypatch.setattr(upcast, "emulated_bf16", lambda: True)           # as on a CPU without bf16 arithmetic


def test_linear_rounds_once_like_bf16s_own_matmul():
    w = _bf16_weight(64, 256)
    g = torch.Generator().manual_seed(1)
    for rows in (1, 8, 40):
        x = torch.randn(1, rows, 256, generator=g).to(torch.bfloat16)
        got = upcast.linear(x, w)
        assert got.dtype == torch.bfloat16 and got.shape == (1, rows, 64)
        assert torch.equal(got, (x.float() @ w.float().T).to(torch.bfloat16))   # fp32, then one rounding
        plain = F.linear(x, w)                                           # bf16's own matmul
        steps = (got.float() - plain.float()).abs() / plain.float().abs().clamp_min(1e-3)
        assert steps.max() <= 2 ** -7                                    # at most a bf16 step apart


def test_the_kernel_takes_only_long_bf16_inputs(emulated, monkeypatch):
    w = _bf16_weight(64, 256)
    g = torch.Generator().manual_seed(2)
    long, short = (torch.randn(1, n, 256, generator=g).to(torch.bfloat16) for n in (upcast.MIN_ROWS, upcast.MIN_ROWS - 1))
    assert torch.equal(products.fast_product(long, w), upcast.linear(long, w))
    assert products.fast_product(short, w) is None                       # decoding: bf16's own product
    assert products.fast_product(long, w, torch.zeros(64)) is None        # an fp32 bias: F.linear's own error
    assert torch.equal(products.fast_product(long, w, torch.zeros(64, dtype=torch.bfloat16)),
                       upcast.linear(long, w, torch.zeros(64, dtype=torch.bfloat16)))
    monkeypatch.setattr(upcast, "MAX_WEIGHT", 64 * 256 - 1)              # the output layer's case: too big
    assert products.fast_product(long, w) is None
    monkeypatch.setattr(upcast, "emulated_bf16", lambda: False)          # bf16 arithmetic: not upcast, but
    monkeypatch.setattr(upcast, "MAX_WEIGHT", 1 << 25)                   # the packed weight where torch packs
    prompt = torch.randn(1, 40, 256, generator=g).to(torch.bfloat16)
    assert not upcast.pays(prompt, w) and products.fast_product(prompt, w) is None   # a prompt: bf16's own
    if packed.available():                                               # after a decode step, the packed
        products.fast_product(prompt[:, :1], w)                          # weight's product, the same numbers
        assert torch.equal(products.fast_product(prompt, w), F.linear(prompt, w))


def test_a_bias_of_another_dtype_raises_as_bf16s_own_matmul_does(emulated):
    w, x = _bf16_weight(64, 256), torch.randn(1, 20, 256).to(torch.bfloat16)
    with pytest.raises(RuntimeError) as plain:
        F.linear(x, w, torch.zeros(64))
    with products.fast(), pytest.raises(RuntimeError) as inside:
        seam.product(x, w, torch.zeros(64))
    assert str(inside.value) == str(plain.value)


def test_a_gradient_wanted_is_declined(emulated):
    w = _bf16_weight(64, 256).requires_grad_(True)
    x = torch.randn(1, 20, 256).to(torch.bfloat16)
    assert products.fast_product(x, w) is None
    with torch.no_grad():
        assert products.fast_product(x, w) is not None


def test_native_bf16_reads_the_cpu_flags():
    assert not upcast.native_bf16("flags\t\t: fpu sse2 avx avx2 fma f16c\n")           # AVX2 only
    assert upcast.native_bf16("flags\t\t: fpu avx2 avx512f avx512_bf16 amx_tile\n")     # x86 with bf16
    assert upcast.native_bf16("flags\t\t: fpu avx2 amx_bf16\n")
    assert upcast.native_bf16("Features\t: fp asimd sve bf16 i8mm\n")                   # ARM with bf16
    assert not upcast.native_bf16("Features\t: fp asimd evtstrm aes\n")


def test_fast_keeps_the_bf16_models_logits_and_greedy_ids(tiny_path, emulated, monkeypatch):
    from qwen.generate import generate_ids
    from qwen.model import load_model
    model = load_model(tiny_path, dtype=torch.bfloat16)
    calls, real = [], upcast.linear
    monkeypatch.setattr(upcast, "linear", lambda x, *a: calls.append(x.shape[-2]) or real(x, *a))
    ids = torch.tensor([list(range(100, 140))])                          # 40 tokens
    with torch.inference_mode():
        plain = model(ids)
        plain_ids = list(generate_ids(model, ids[0, :12].tolist(), max_new_tokens=4))
        assert calls == []
        with products.fast():
            fast = model(ids)
            fast_ids = list(generate_ids(model, ids[0, :12].tolist(), max_new_tokens=4))
    assert calls and set(calls) == {40, 12}                              # the prompts' rows; decoding: bf16's own
    assert (plain - fast).abs().max() <= 0.05 * plain.abs().max()        # bf16 roundings, in another order
    assert (plain.argmax(-1) == fast.argmax(-1)).float().mean() > 0.9
    assert not torch.equal(plain, fast)                                  # (the fast path did run)
    assert fast_ids == plain_ids
