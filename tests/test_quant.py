"""qwen/quant.py: quantize / dequantize by hand, torch's weight-only kernels against the dequantized
fp32 matmul, and a quantized model that decodes (issue 24, chapter 13)."""
import pytest
import torch

from qwen import quant
from qwen.lang import QwenError


def _weight(out, n_in, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(out, n_in, generator=g) * 0.02
    w[3, 5] = 0.5                                                   # an outlier in row 3
    return w


def test_int8_is_absmax_per_row_within_half_a_step():
    w = _weight(64, 256)
    q, scale = quant.quantize_int8(w)
    assert q.dtype == torch.int8 and scale.shape == (64,)
    assert torch.equal(q.abs().amax(1), torch.full((64,), 127, dtype=torch.int8))   # each row's largest -> 127
    d = (w - quant.dequantize_int8(q, scale)).abs()
    assert (d <= scale[:, None] / 2 + 1e-7).all()                  # rounding: half a step at most
    assert scale[3] > 5 * scale[4]                                  # the outlier coarsens its own row only


def test_int4_groups_and_packing():
    w = _weight(32, 256)
    q, scale = quant.quantize_int4(w, group=128)
    assert scale.shape == (32, 2) and int(q.min()) >= -7 and int(q.max()) <= 7
    d = (w - quant.dequantize_int4(q, scale)).abs().reshape(32, 2, 128)
    assert (d <= scale[..., None] / 2 + 1e-7).all()
    codes = torch.arange(-8, 8, dtype=torch.int8).repeat(4, 2)      # every code, in both nibbles
    packed = quant.pack_int4(codes)
    assert packed.dtype == torch.uint8 and packed.shape == (4, 16)
    assert torch.equal(quant.unpack_int4(packed), codes)
    assert quant.group_size(16) == 16 and quant.group_size(3584) == 128 and quant.group_size(48) == 16


def test_all_zero_rows_quantize_to_zero():
    w = torch.zeros(16, 64)
    assert torch.equal(quant.dequantize_int8(*quant.quantize_int8(w)), w)
    assert torch.equal(quant.dequantize_int4(*quant.quantize_int4(w, 32)), w)


@pytest.mark.parametrize("kind,group", [("int8", None), ("int4", 128), ("int4", 32)])
def test_kernel_equals_the_dequantized_fp32_matmul(kind, group):
    """torch's weight-only kernels (the fast path) against dequantize-then-matmul (the plain one)."""
    w = _weight(64, 256, seed=1)
    x = torch.randn(2, 3, 256, generator=torch.Generator().manual_seed(2))
    if kind == "int8":
        fast, plain = quant.Int8Linear.from_weight(w), quant.Int8Linear.from_weight(w, kernel=False)
        deq = quant.dequantize_int8(*quant.quantize_int8(w))
    else:
        fast, plain = quant.Int4Linear.from_weight(w, group=group), quant.Int4Linear.from_weight(w, kernel=False, group=group)
        deq = quant.dequantize_int4(*quant.quantize_int4(w, group))
        assert fast.nbytes < plain.nbytes + 64 * 256 // group * 4 + 1 and plain.packed.shape == (64, 128)
    assert fast.kernel and not plain.kernel
    want = x @ deq.T                                                # (2, 3, 64)
    for layer in (fast, plain):
        got = layer(x)
        assert got.shape == (2, 3, 64)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(layer.dequantized(), deq, atol=1e-7, rtol=0)


def test_bad_mode_is_one_line():
    with pytest.raises(QwenError, match=r"--quant int3: choose int8 .* or int4"):
        quant.check_mode("int3")


@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_quantize_model_decodes(tiny_path, mode):
    """quantize_model(model, mode) returns a model generate_ids decodes with; kernel = plain path, token
    for token; cached = uncached; smaller; every projection replaced, the small ones kept."""
    from qwen.generate import generate_ids
    from qwen.model import load_model
    model = quant.quantize_model(load_model(tiny_path, vision=False), mode)
    plain = quant.quantize_model(load_model(tiny_path, vision=False), mode, kernel=False)
    ids = list(range(100, 112))
    out = list(generate_ids(model, ids, max_new_tokens=6))
    assert len(out) == 6 and out == list(generate_ids(plain, ids, max_new_tokens=6))
    seq = torch.tensor([ids + out[:-1]])                           # (1, 17)
    cache = model.new_cache()
    model(seq[:, :-1], cache=cache)
    step = model(seq[:, -1:], cache=cache)[:, -1]                   # decoded with the cache
    torch.testing.assert_close(step, model(seq)[:, -1], atol=1e-4, rtol=1e-4)
    assert quant.projections(model) == []                           # every projection replaced
    layer = model.layers[0].linear_attn
    assert isinstance(layer.in_proj_qkv, quant.Int8Linear if mode == "int8" else quant.Int4Linear)
    assert isinstance(layer.in_proj_a, torch.nn.Linear) and layer.in_proj_a.weight.dtype == torch.float32
    assert isinstance(model.embed_tokens, quant.Int8Embedding) and model.output_layer is model.embed_tokens.table
    assert quant.weight_bytes(model) < 0.35 * quant.weight_bytes(load_model(tiny_path, vision=False))


def test_quantized_output_matches_fp32_closely_in_int8(tiny_path):
    """int8 per row moves the logits by a small fraction of their size (the tiny checkpoint: random values)."""
    from qwen.model import load_model
    ids = torch.tensor([list(range(100, 116))])
    ref = load_model(tiny_path, vision=False)(ids)
    got = quant.quantize_model(load_model(tiny_path, vision=False), "int8")(ids)
    assert (got - ref).abs().max() < 0.05 * ref.abs().max()


def test_main_quant_refuses_bad_values_in_one_line(run_script, capsys):
    """Checked before any weights are read: one line, in the learner's language."""
    import main
    r = run_script("main.py", "9", "--tiny", "--quant", "int3")
    assert r.returncode == 1 and "Traceback" not in r.stderr and "Chapter 9" not in r.stdout, r.stderr
    assert r.stderr.splitlines()[0].startswith("Error: --quant int3: choose int8")
    with pytest.raises(QwenError) as e:
        main.main(["chat", "--tiny", "--quant", "fp8", "--lang", "zh"])
    assert e.value.zh.startswith("--quant fp8：请选 int8") and "\n" not in e.value.zh
    with pytest.raises(SystemExit):
        main.main(["3", "--tiny", "--quant", "int8"])
    assert "--quant is for chat and chapter 9" in capsys.readouterr().err
    with pytest.raises(QwenError, match="--quant and --speculative do not go together"):
        main.main(["9", "--tiny", "--quant", "int8", "--speculative", "2"])
