"""engine/upcast.py: a bf16 prompt read with its projections in fp32 gives the plain bf16 model's numbers,
and generation reads every bf16 prompt that way (issue 24), leaving decoding and fp32 as they are."""
import pytest
import torch
from engine import products
import torch.nn.functional as F

from engine import upcast


def _bf16_linear(out_f, in_f, seed=0):
    g = torch.Generator().manual_seed(seed)
    linear = torch.nn.Linear(in_f, out_f, bias=False).to(torch.bfloat16)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(out_f, in_f, generator=g) * 0.05)
    return linear


def _count_fast_calls(monkeypatch):
    calls = []
    real = upcast.linear
    monkeypatch.setattr(upcast, "linear", lambda *a, **k: calls.append(a[0].shape) or real(*a, **k))
    return calls


def test_linear_rounds_once_like_bf16s_own_matmul():
    linear = _bf16_linear(64, 256)
    g = torch.Generator().manual_seed(1)
    for rows in (1, 8, 40):
        x = torch.randn(1, rows, 256, generator=g).to(torch.bfloat16)
        want = (x.float() @ linear.weight.float().T).to(torch.bfloat16)    # fp32, then one rounding
        got = upcast.linear(x, linear.weight)
        assert got.dtype == torch.bfloat16 and got.shape == (1, rows, 64)
        assert torch.equal(got, want)
        plain = linear(x)                                                # bf16's own matmul
        steps = (got.float() - plain.float()).abs() / plain.float().abs().clamp_min(1e-3)
        assert steps.max() <= 2 ** -7                                    # at most a bf16 step apart


def test_prompt_pass_takes_only_long_bf16_inputs(monkeypatch):
    linear = _bf16_linear(64, 256)
    fp32 = torch.nn.Linear(256, 64, bias=False)
    g = torch.Generator().manual_seed(2)
    long, short = (torch.randn(1, n, 256, generator=g).to(torch.bfloat16) for n in (8, 7))
    calls = _count_fast_calls(monkeypatch)
    with upcast.PromptPass(8):
        got_long, got_short, got_fp32 = linear(long), linear(short), fp32(long.float())
    assert calls == [long.shape]                                         # 8 rows: in fp32; 7 rows and fp32: not
    assert torch.equal(got_long, (long.float() @ linear.weight.float().T).to(torch.bfloat16))
    assert torch.equal(got_short, F.linear(short, linear.weight))        # bf16's own matmul
    assert torch.equal(got_fp32, fp32(long.float()))
    monkeypatch.setattr(upcast, "MAX_WEIGHT", 64 * 256 - 1)              # the output layer's case: too big
    with upcast.PromptPass(8):
        linear(long)
    assert len(calls) == 1
    linear(long)                                                         # outside the context: plain
    assert len(calls) == 1


def test_native_bf16_reads_the_cpu_flags():
    assert not upcast.native_bf16("flags\t\t: fpu sse2 avx avx2 fma f16c\n")           # this machine's kind
    assert upcast.native_bf16("flags\t\t: fpu avx2 avx512f avx512_bf16 amx_tile\n")     # x86 with bf16
    assert upcast.native_bf16("flags\t\t: fpu avx2 amx_bf16\n")
    assert upcast.native_bf16("Features\t: fp asimd sve bf16 i8mm\n")                   # ARM with bf16
    assert not upcast.native_bf16("Features\t: fp asimd evtstrm aes\n")


@pytest.fixture(scope="module")
def bf16_tiny(tiny_path):
    from qwen.model import load_model
    return load_model(tiny_path, dtype=torch.bfloat16, vision=False)


def test_generate_reads_a_bf16_prompt_in_fp32_and_decodes_in_bf16(bf16_tiny, monkeypatch):
    from qwen.generate import generate_ids
    monkeypatch.setattr(upcast, "emulated_bf16", lambda: True)           # as on this AVX2 machine
    model = bf16_tiny
    linears = sum(isinstance(m, torch.nn.Linear) for m in model.layers.modules())
    kinds = [type(m) for m in model.modules()]
    calls = _count_fast_calls(monkeypatch)
    prompt = list(range(100, 100 + upcast.MIN_ROWS + 3))
    with products.fast():                                       # the engine's kernel, through qwen/linear.py
        tokens = generate_ids(model, prompt, max_new_tokens=3)
        next(tokens)                                                         # the prompt is read
        assert len(calls) == linears                                         # every projection once, in fp32
        assert all(shape[-2] == len(prompt) for shape in calls)              # (the output layer: one row, bf16)
        list(tokens)                                                         # two decode steps: one row each
        assert len(calls) == linears
        assert [type(m) for m in model.modules()] == kinds                   # nothing replaced or wrapped
        next(generate_ids(model, prompt[:upcast.MIN_ROWS - 1], max_new_tokens=1))
        assert len(calls) == linears                                         # a short prompt: bf16's own matmul
        cache = model.new_cache()
        with torch.inference_mode():
            model(torch.tensor([prompt[:3]]), cache=cache, last=True)                # 3 (a chat's kept copy), then MIN_ROWS
        next(generate_ids(model, prompt[3:], max_new_tokens=1, cache=cache))
        assert len(calls) == 2 * linears                                     # read in two parts: the long one in fp32


def test_no_prompt_pass_for_fp32_or_a_cpu_with_bf16(tiny_path, bf16_tiny, monkeypatch):
    import contextlib
    from qwen.model import load_model
    monkeypatch.setattr(upcast, "emulated_bf16", lambda: True)
    assert isinstance(upcast.prompt_pass(bf16_tiny), upcast.PromptPass)
    assert isinstance(upcast.prompt_pass(load_model(tiny_path, vision=False)), contextlib.nullcontext)
    monkeypatch.setattr(upcast, "emulated_bf16", lambda: False)          # AVX-512 BF16 / AMX: bf16's own matmul
    assert isinstance(upcast.prompt_pass(bf16_tiny), contextlib.nullcontext)


def test_the_prompt_pass_raises_where_bf16s_own_matmul_raises():
    """A bf16 weight with an fp32 bias is an error in F.linear; inside the prompt pass it ran (everything
    made fp32 first), so code that works there could fail outside it. Now the same error in both."""
    linear = _bf16_linear(64, 256)
    x = torch.randn(1, 20, 256).to(torch.bfloat16)
    bias = torch.zeros(64)                                               # fp32
    with pytest.raises(RuntimeError) as plain:
        F.linear(x, linear.weight, bias)
    with upcast.PromptPass(8), pytest.raises(RuntimeError) as inside:
        F.linear(x, linear.weight, bias)
    assert str(inside.value) == str(plain.value)
    with upcast.PromptPass(8):                                           # a bf16 bias: the fp32 path, as before
        got = F.linear(x, linear.weight, bias.to(torch.bfloat16))
    assert torch.equal(got, (x.float() @ linear.weight.float().T).to(torch.bfloat16))


def test_the_mtp_head_reads_a_bf16_prompt_in_fp32_too(bf16_tiny, monkeypatch):
    """Speculative decoding reads the prompt twice: the model (inside the prompt pass since it was wired
    in), then the head, on its first draft (len(prompt) rows through fc and its decoder layer). The
    head's read ran bf16's own matmuls: now it goes through the pass as the model's does."""
    from qwen.mtp import speculative_ids
    monkeypatch.setattr(upcast, "emulated_bf16", lambda: True)
    from qwen.mtp import load_head
    model = bf16_tiny
    load_head(model)
    head = [m.weight.data_ptr() for m in model.mtp.modules() if isinstance(m, torch.nn.Linear)]
    calls = []
    real = upcast.linear
    monkeypatch.setattr(upcast, "linear", lambda x, w, b=None: calls.append((w.data_ptr(), x.shape[-2])) or real(x, w, b))
    prompt = list(range(100, 100 + upcast.MIN_ROWS + 3))
    with products.fast():                                       # the engine's kernel, through qwen/linear.py
        list(speculative_ids(model, prompt, 2, max_new_tokens=3))
    read = [rows for ptr, rows in calls if ptr in head]
    assert len(read) == len(head) and set(read) == {len(prompt)}         # each head projection once, the whole prompt
