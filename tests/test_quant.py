"""qwen/quant.py: quantize / dequantize by hand, torch's weight-only kernels (engine/quantized.py, behind
quant.py's seam) against the dequantized fp32 matmul, and a quantized model that decodes (chapter 13)."""
import pytest
import torch

from engine import quantized
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


def _close_in_bf16(got, want):
    """Within bf16's rounding: the kernels take x and the scales in bf16 and return bf16."""
    torch.testing.assert_close(got, want, atol=0.01 * float(want.abs().max()), rtol=0.01)


@pytest.mark.parametrize("kind,group", [("int8", None), ("int4", 128), ("int4", 32)])
def test_kernel_equals_the_dequantized_fp32_matmul(kind, group):
    """torch's weight-only kernels (the fast path) against dequantize-then-matmul in fp32 (the plain
    one), for one token (decode) and for a prompt (int8 goes plain above KERNEL_ROWS rows)."""
    w = _weight(64, 256, seed=1)
    if kind == "int8":
        with quantized.kernels():
            fast, plain = quant.Int8Linear.from_weight(w), quant.Int8Linear.from_weight(w, kernel=False)
        deq = quant.dequantize_int8(*quant.quantize_int8(w))
    else:
        with quantized.kernels():
            fast, plain = quant.Int4Linear.from_weight(w, group=group), quant.Int4Linear.from_weight(w, kernel=False, group=group)
        deq = quant.dequantize_int4(*quant.quantize_int4(w, group))
        assert plain.packed.shape == (64, 128) and fast.nbytes <= plain.nbytes + 64 * 256 // group * 4
    assert fast.kernel and not plain.kernel
    torch.testing.assert_close(plain.dequantized(), deq, atol=0, rtol=0)
    _close_in_bf16(fast.dequantized(), deq)
    g = torch.Generator().manual_seed(2)
    for x in (torch.randn(1, 1, 256, generator=g), torch.randn(2, 3, 256, generator=g),
              torch.randn(1, quantized.KERNEL_ROWS + 1, 256, generator=g)):
        want = x @ deq.T                                            # (..., 64)
        torch.testing.assert_close(plain(x), want, atol=1e-5, rtol=1e-4)
        _close_in_bf16(fast(x), want)
    x = torch.randn(1, quantized.KERNEL_ROWS + 1, 256, generator=g)
    if kind == "int8":                                              # a prompt: the plain path exactly
        torch.testing.assert_close(fast(x), plain(x), atol=0, rtol=0)


@pytest.mark.parametrize("n_in", [12, 100, 130])
def test_int8_with_in_features_the_kernel_cannot_read_takes_the_plain_path(n_in):
    """torch's int8 kernel reads past such rows (numbers ~1e31, or a segfault for 6 or 7), so they take
    the plain path."""
    w, x = _weight(5, n_in), torch.randn(2, n_in, generator=torch.Generator().manual_seed(1))
    with quantized.kernels():
        layer = quant.Int8Linear.from_weight(w)
        assert quant.Int8Linear.from_weight(_weight(5, 16)).kernel == hasattr(torch, "_weight_int8pack_mm")
    assert not layer.kernel
    torch.testing.assert_close(layer(x), x @ layer.dequantized().T, atol=1e-4, rtol=1e-4)


def test_int4_with_an_odd_number_of_inputs_is_one_line():
    """Two codes a byte: 7 inputs are one line saying why, not a tensor-size mismatch from inside pack_int4."""
    with pytest.raises(QwenError, match=r"packed two a byte: a weight with 7 inputs \(an odd number\) cannot be"):
        quant.Int4Linear.from_weight(_weight(5, 7), kernel=False)


def test_bad_mode_is_one_line():
    with pytest.raises(QwenError, match=r"--quant int3: choose int8 .* or int4"):
        quantized.check_mode("int3")
    with pytest.raises(QwenError, match=r"Quantize to int8 or int4, not int3"):
        quant.quantize_model(None, "int3")


@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_quantize_model_decodes(tiny_path, mode):
    """quantize_model(model, mode) returns a model generate_ids decodes with; the kernels agree with the
    plain path; cached = uncached; smaller; every projection replaced, the small ones kept."""
    from qwen.generate import generate_ids
    from qwen.model import load_model
    with quantized.kernels():
        model = quant.quantize_model(load_model(tiny_path, vision=False), mode)
        plain = quant.quantize_model(load_model(tiny_path, vision=False), mode, kernel=False)
    ids = list(range(100, 112))
    out = list(generate_ids(model, ids, max_new_tokens=6))
    assert len(out) == 6 and all(isinstance(t, int) for t in out)
    seq = torch.tensor([ids + out[:-1]])                           # (1, 17)
    for m in (model, plain):
        cache = m.new_cache()
        m(seq[:, :-1], cache=cache)
        step = m(seq[:, -1:], cache=cache)[:, -1]                   # decoded with the cache
        whole = m(seq)[:, -1]
        if m is plain:
            torch.testing.assert_close(step, whole, atol=1e-4, rtol=1e-4)
        else:
            _close_in_bf16(step, whole)
    _close_in_bf16(model(seq[:, -1:]), plain(seq[:, -1:]))
    assert quant.projections(model) == []                           # every projection replaced
    layer = model.layers[0].linear_attn
    assert isinstance(layer.in_proj_qkv, quant.Int8Linear if mode == "int8" else quant.Int4Linear)
    assert isinstance(layer.in_proj_a, torch.nn.Linear) and layer.in_proj_a.weight.dtype == torch.float32
    assert isinstance(model.embed_tokens, quant.Int8Embedding) and model.output_layer is model.embed_tokens.table
    assert quantized.weight_bytes(model) < 0.35 * quantized.weight_bytes(load_model(tiny_path, vision=False))
    outside = quant.quantize_model(load_model(tiny_path, vision=False), mode)        # no kernel installed: plain
    assert not any(m.kernel for m in outside.modules() if isinstance(m, (quant.Int8Linear, quant.Int4Linear)))
    torch.testing.assert_close(outside(seq), plain(seq), atol=0, rtol=0)


def test_quantizing_a_quantized_model_again_is_one_line(tiny_path):
    """Its fp32 weights are gone, so a second quantize_model is one line, not an AttributeError
    (Int8Embedding has no weight), and int8 -> int4 never silently leaves the int8 projections in place."""
    from qwen.model import load_model
    model = quant.quantize_model(load_model(tiny_path, vision=False), "int8")
    for mode in ("int8", "int4"):
        with pytest.raises(QwenError, match=r"already quantized \(int8\): load it again .* to quantize it to " + mode):
            quant.quantize_model(model, mode)
    assert isinstance(model.layers[0].mlp.down_proj, quant.Int8Linear)


def test_quantizing_the_stored_bf16_gives_the_fp32_models_numbers(tiny_path):
    """load_model(dtype=None) keeps the file's bf16 (half the bytes while quantizing); bf16 -> fp32 is exact,
    so the quantized model is the same, and what stays a parameter is fp32."""
    from qwen.model import load_model
    ids = torch.tensor([list(range(100, 110))])
    for mode in quant.MODES:
        a = quant.quantize_model(load_model(tiny_path, vision=False), mode)
        b = quant.quantize_model(load_model(tiny_path, dtype=None, vision=False), mode)
        assert {p.dtype for p in b.parameters()} == {torch.float32}
        assert all(t.untyped_storage().resizable() for t in [*b.parameters(), *b.buffers()])   # none mapped
        #   from the file: one mapped tensor (A_log is fp32 in the file) keeps the whole file's mapping resident
        torch.testing.assert_close(a(ids), b(ids), atol=0, rtol=0)


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
    with pytest.raises(QwenError, match="--quant and --mine do not go together"):
        main.main(["chat", "--tiny", "--quant", "int4", "--mine"])
    r = run_script("ch09_generate.py", "--tiny", "--quant", "int8", "--mine")
    assert r.returncode == 1 and r.stderr.startswith("Error: --quant and --mine do not go together"), r.stderr


def test_ch09_quantized_says_why_cached_decoding_differs(tiny_path):
    """`9 --quant int8` prints 'cached decoding = reading everything again: ... 2.6e-02' (fp32: 1e-06)
    and says why: one token goes through the kernel (bf16 inputs), the whole text the plain path.
    In this process (as tests/test_chapter_claims.py runs chapters): a subprocess costs seconds more."""
    import re
    out = _ch09_quantized("int8")
    assert re.search(r"\n  weights quantized to int8 \(chapter 13\): [\d.]+ MB in bf16 -> [\d.]+ MB\n", out)
    m = re.search(r"cached decoding = reading everything again: max \|difference\| of the last logits = (\S+)\n"
                  r"  \(one more step from the reply's cache, which held 33 tokens, against all 34 read at once\)\n"
                  r"  \(the logits are up to .*\n.*\n.*; within it: (?:True|False)\)\n"
                  r"  \(quantized: a step of one token runs torch's int8 kernel with bf16 inputs, reading all (\d+) "
                  r"tokens at\n  once the plain fp32 path", out)
    assert m and float(m[1]) > 1e-4 and int(m[2]) == 34                # 30 prompt tokens + the 4 replied
    assert int(m[2]) > quantized.KERNEL_ROWS                                # at most KERNEL_ROWS: the kernel both ways


def test_ch09_int4_says_which_layers_run_the_4bit_kernel(tiny_path):
    """int4 has no plain path above KERNEL_ROWS: the layers that fit torch's 4-bit kernel run it for any
    number of rows, the others dequantize to fp32. Chapter 9 counts them from the model it built."""
    import re
    out = _ch09_quantized("int4")
    m = re.search(r"  \(quantized: (\d+) of (\d+) 4-bit layers run torch's 4-bit kernel, for one token and for "
                  r"all 34 at once\n", out)
    model = quantized.load_quantized(tiny_path, "int4")
    kernels = [x.kernel for x in model.modules() if isinstance(x, quant.Int4Linear)]
    assert m and (int(m[1]), int(m[2])) == (sum(kernels), len(kernels)) and 0 < sum(kernels) < len(kernels)
    assert "int8 kernel" not in out


def _ch09_quantized(mode):
    """Chapter 9 on the tiny checkpoint with --quant mode, in this process (as tests/test_chapter_claims.py
    runs chapters: a subprocess costs seconds more): what it printed."""
    import contextlib
    import io
    import runpy
    import sys
    from conftest import ROOT
    argv, grad, threads, out = sys.argv, torch.is_grad_enabled(), torch.get_num_threads(), io.StringIO()
    sys.argv = [str(ROOT / "ch09_generate.py"), "--tiny", "--lang", "en", "--quant", mode, "--max-new-tokens", "4"]
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(sys.argv[0], run_name="__main__")
    finally:
        sys.argv = argv
        torch.set_grad_enabled(grad)                                   # chapter 9 turns gradients off
        torch.set_num_threads(threads)
    return out.getvalue()


# ---------------------------------------------------------------- chapter 13 (the whole-course runs of test_chapters)

def test_ch13(course_en):
    """On the tiny checkpoint: the error statistics hold and are checked; the quality numbers are said to mean little."""
    import re
    out = course_en[course_en.index("# ch13_quantize.py"):]
    from conftest import ROOT
    places = re.search(r"the code this chapter teaches: (.*) \(--code prints it\)", out).group(1).split(", ")
    assert places == ["qwen.quant qwen/quant.py:1"]                  # the whole lesson file, from its first line
    assert (ROOT / "qwen" / "quant.py").read_text(encoding="utf-8").startswith('"""')
    assert "quality\n  numbers (logits, greedy tokens) mean little" in out
    m = re.search(r"error: max (\S+), RMS (\S+) \((\S+)% of the weights' RMS\); within half a step everywhere "
                  r"\(up to fp32's rounding\): True", out)
    assert m and float(m[1]) > float(m[2]) > 0 and float(m[3]) < 1
    assert float(re.search(r"one scale for the whole tensor instead: RMS error \S+, ([\d.]+)x the per-row one", out)[1]) > 1
    assert re.search(r"round then clamp vs clamp then round, on [\d,]+ values \(some past the bounds\): 0 codes differ", out)
    assert float(re.search(r"int8 cast without rounding: RMS error ([\d.]+)x", out)[1]) > 1.5
    assert re.search(r"groups of +16: RMS error \S+ \([\d.]+x int8's\), max \S+; 6\.00 bits a weight", out)
    assert "unpacked again equal: True" in out
    assert re.search(r"\n {8,}projections +output layer +fp32 rest +total\n", out)     # the header's cells apart
    table = re.findall(r"\n  (fp32|int8|int4) +([\d.]+ [KMG]?B) +([\d.]+ [KMG]?B) +([\d.]+ [KMG]?B) +([\d.]+ [KMG]?B)", out)
    assert [r[0] for r in table] == ["fp32", "int8", "int4"] and table[1][3] == table[0][3]   # the fp32 rest is kept
    assert f"the output layer (the tied table) is int8 in both models, {table[1][2]} and {table[2][2]}: only the " \
           "projections go to 4 bits" in out and table[1][2] == table[2][2]
    for mode in ("int8", "int4"):
        d = float(re.search(mode + r": kernel against the plain path: max \|difference\| ([\d.]+)% of the largest", out)[1])
        assert d < 1.5                                              # bf16's rounding, not a wrong layout
        m = re.search(mode + r": largest logit difference ([\d.]+) \(logits up to ([\d.]+)\); greedy token differs at "
                      r"(\d+) of 12; decode [\d.]+ tokens/s", out)
        assert m and 0 < float(m[1]) < float(m[2]) and int(m[3]) <= 12
    assert "the full-size\n  figures are measured by bench/bench_model.py" in out
    assert "Exercise for this chapter: 260" in out and "Done: chapter(s) 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14 " in out


def test_ch13_in_chinese(course_zh):
    import re
    out = course_zh[course_zh.index("# ch13_quantize.py"):]
    for text in ("第 13 章：手写量化", "处处不超过半步（允许 fp32 自身的舍入）：是", "先取整再钳位与先钳位再取整相比", "解包后相同：是", "本章练习：260"):
        assert text in out, text
    assert re.search(r"\n {8,}投影 +输出层 +fp32 其余 +合计\n", out)                    # the header's cells apart


def test_from_weight_by_blocks_of_rows_is_the_whole_weights_quantization(monkeypatch):
    """quantize_model quantizes ROWS_AT_ONCE rows at a time (the 1 GB table's temporaries): the same codes."""
    monkeypatch.setattr(quant, "ROWS_AT_ONCE", 7)                    # blocks that do not divide the 64 rows
    w = _weight(64, 256, seed=4)
    q, scale = quant.quantize_int8(w)
    layer = quant.Int8Linear.from_weight(w, kernel=False)
    assert torch.equal(layer.q, q) and torch.equal(layer.scale, scale)
    q4, scale4 = quant.quantize_int4(w, 32)
    layer4 = quant.Int4Linear.from_weight(w, kernel=False, group=32)
    assert torch.equal(quant.unpack_int4(layer4.packed), q4) and torch.equal(layer4.scale, scale4)


@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_load_quantized_is_quantize_model_without_the_full_model(tiny_path, monkeypatch, mode):
    """Quantized while loading (a block of rows at a time from the file): the same buffers, parameters
    and logits as quantize_model(load_model(...)), and nothing left mapped from the file."""
    from qwen.model import load_model
    monkeypatch.setattr(quant, "ROWS_AT_ONCE", 5000)                   # blocks that do not divide the table's rows
    with quantized.kernels():
        ref = quant.quantize_model(load_model(tiny_path, vision=False), mode)
    got = quantized.load_quantized(tiny_path, mode)
    a, b = dict(ref.state_dict()), dict(got.state_dict())
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key
    assert all(t.untyped_storage().resizable() for t in [*got.parameters(), *got.buffers()])   # none mapped
    ids = torch.tensor([list(range(100, 110))])
    torch.testing.assert_close(got(ids), ref(ids), atol=0, rtol=0)
    assert got.quant == mode and got.mtp is None and got.output_layer is got.embed_tokens.table
    assert got.unused == ref.unused
    stored, dtype = got.stored
    assert dtype == "bf16" and stored == quantized.weight_bytes(load_model(tiny_path, dtype=None, vision=False))


def test_load_quantized_reads_no_weight_whole(tiny_path, monkeypatch):
    """The stored bf16 model is never in memory: the weights it quantizes are read ROWS_AT_ONCE rows at
    a time (reading the whole model first would take main.py 9 --quant int8 to 2.5 GB on the full size)."""
    seen = []
    read = quantized.StoredRows.__getitem__
    monkeypatch.setattr(quantized.StoredRows, "__getitem__", lambda self, rows: seen.append((self.name, rows)) or read(self, rows))
    monkeypatch.setattr(quant, "ROWS_AT_ONCE", 5000)
    model = quantized.load_quantized(tiny_path, "int8")
    table = [rows for name, rows in seen if name == "embed_tokens.weight"]
    assert len(table) == -(-model.cfg.vocab_size // 5000) and all(r.stop - r.start == 5000 for r in table)
    assert {name for name, _ in seen} == {"embed_tokens.weight"} | {n + ".weight" for n, *_ in
                                                                  quant.projections(load_model_meta(tiny_path))}
    import qwen.weights
    mapped = qwen.weights.Weights.__getitem__
    monkeypatch.setattr(qwen.weights.Weights, "__getitem__", lambda self, name: pytest.fail(f"{name} mapped")
                        if len(self.shape(name)) > 1 else mapped(self, name))
    quantized.load_quantized(tiny_path, "int4")                       # no weight through the mapping either


def load_model_meta(path):
    from qwen.model import Qwen35
    from qwen.config import Config
    with torch.device("meta"):
        return Qwen35(Config.load(path))


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_nan_or_inf_weight_is_one_line_naming_the_tensor(tiny_path, bad):
    """A NaN or inf weight is one line naming the tensor: quantizing it would silently give a row of
    garbage codes (scale nan -> 1, codes from nan)."""
    from qwen.lang import set_lang
    from qwen.model import load_model
    model = load_model(tiny_path, vision=False)
    model.layers[1].mlp.up_proj.weight[3, 2] = bad
    with pytest.raises(QwenError, match=r"^layers\.1\.mlp\.up_proj\.weight: row 3 holds (nan|inf): only finite "
                                        r"numbers can be quantized") as e:
        quant.quantize_model(model, "int8")
    assert e.value.zh.startswith("layers.1.mlp.up_proj.weight：第 3 行含有") and "\n" not in e.value.zh
    set_lang("en")
    w = _weight(8, 32)
    w[5, 0] = bad
    with pytest.raises(QwenError, match=r"^this weight: row 5 holds"):
        quant.Int4Linear.from_weight(w)


def test_a_nan_weight_in_the_file_is_one_line_naming_the_file_and_the_key(tmp_path):
    """load_quantized (main.py 9 / chat --quant) names the file of the checkpoint as well as the key
    ('layers.0.mlp.down_proj.weight: row 3 holds nan'), in both languages: the learner knows which file."""
    from qwen.lang import set_lang
    from engine.tiny import tiny_config, tiny_tensors, write_checkpoint
    tensors = tiny_tensors()
    key = "model.language_model.layers.0.mlp.down_proj.weight"
    tensors[key] = tensors[key].clone()
    tensors[key][3, 5] = float("nan")
    folder = write_checkpoint(tmp_path / "ck", tensors, tiny_config())
    file = folder / "model.safetensors-00001-of-00001.safetensors"
    with pytest.raises(QwenError) as e:
        quantized.load_quantized(folder, "int8")
    assert e.value.en.startswith(f"{file}: layers.0.mlp.down_proj.weight: row 3 holds nan: only finite"), e.value.en
    assert e.value.zh.startswith(f"{file}：layers.0.mlp.down_proj.weight：第 3 行含有 nan") and "\n" not in e.value.zh
    set_lang("en")


def test_the_plain_int8_path_dequantizes_a_block_of_rows_at_a_time(monkeypatch):
    """The uncached pass of a quantized model (chapter 9's check) rebuilds ROWS_AT_ONCE rows at a time in
    fp32, not the whole 248,320-row table (1 GB) at once, and gives the same numbers."""
    monkeypatch.setattr(quant, "ROWS_AT_ONCE", 24)
    w, x = _weight(100, 64), torch.randn(2, 40, 64, generator=torch.Generator().manual_seed(3))
    layer = quant.Int8Linear.from_weight(w, kernel=False)
    made = []
    deq = quant.dequantize_int8
    monkeypatch.setattr(quant, "dequantize_int8", lambda q, s: made.append(q.shape[0]) or deq(q, s))
    torch.testing.assert_close(layer(x), x @ deq(layer.q, layer.scale).T, atol=1e-5, rtol=1e-4)
    assert made == [24, 24, 24, 24, 4]


def test_exercise_260_reference_agrees_with_the_library_on_a_row_of_zeros(tiny_path, tmp_path):
    """On an all-zero row qwen/quant.py gives scale 1, and so does s260.py (dividing by a zero scale gives
    NaN codes); exercise 260 has such a case and its statement says what to do."""
    import runpy
    from conftest import ROOT
    from practice._judge.exercises import BY_ID, Context
    judge = ROOT / "practice" / "_judge"
    w = _weight(6, 32)
    w[[1, 4]] = 0
    want = quant.quantize_int8(w)
    assert torch.equal(want[1][[1, 4]], torch.ones(2))
    for file in (judge / "solutions" / "s260.py", *BY_ID["260"].equivalents()):
        q, scale = runpy.run_path(str(file))["quantize_int8"](w.clone())
        assert torch.equal(q, want[0]) and torch.equal(scale, want[1]), file.name
    cases = BY_ID["260"].cases(Context(tiny_path, tmp_path))
    assert any(c.function == "quantize_int8" and bool((c.args[0] == 0).all(dim=1).any()) for c in cases)
    statement = (judge / "starters" / "260_int8_quantize.py").read_text(encoding="utf-8")
    assert "A row of zeros has max |w| = 0, and w / 0 is NaN: give it scale 1" in statement
    assert "全 0 的行 max |w| = 0，而 w / 0 是 NaN：让它的缩放因子为 1" in statement


EPSILON_260 = """import torch
def quantize_int8(w):
    scale = w.abs().amax(dim=1).clamp_min(1e-12) / 127
    return torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8), scale
def dequantize_int8(q, scale):
    return q.float() * scale[:, None]
"""


def test_exercise_260_names_an_epsilon_scale_for_what_it_is(judge, tmp_path):
    """An epsilon against dividing by zero (amax.clamp_min(1e-12) / 127: codes right, scale 8e-15 on a row
    of zeros) gets its own diagnosis, not "got the scale 0 ... w / 0 is NaN" (neither is so); the
    scale 0 keeps zero_scale's."""
    from practice._judge.exercises import BY_ID
    from engine.tiny import tiny_model_path
    named = {}
    for name, body in (("eps", EPSILON_260), ("zero", EPSILON_260.replace(".clamp_min(1e-12)", "").replace(
            "return torch.round(w / scale[:, None])", "return torch.nan_to_num(torch.round(w / scale[:, None]))"))):
        (tmp_path / f"{name}.py").write_text(body, encoding="utf-8")
        result = judge.grade(BY_ID["260"], tmp_path / f"{name}.py", tiny_model_path())
        assert result["status"] == "fail", name
        named[name] = [c["diagnosis"]["name"] for c in result["cases"] if c.get("diagnosis")]
    assert named == {"eps": ["epsilon_scale"], "zero": ["zero_scale"]}


@pytest.fixture(scope="module")
def ch13_run(tiny_path):
    """Chapter 13 run once with --tiny, in this process (as tests/test_chapter_claims.py runs chapters):
    (namespace, stdout)."""
    import contextlib
    import io
    import runpy
    import sys
    from conftest import ROOT
    argv, grad, threads, out = sys.argv, torch.is_grad_enabled(), torch.get_num_threads(), io.StringIO()
    sys.argv = [str(ROOT / "ch13_quantize.py"), "--tiny", "--lang", "en", "--tokens", "4"]
    try:
        with contextlib.redirect_stdout(out):
            ns = runpy.run_path(sys.argv[0], run_name="__main__")
    finally:
        sys.argv = argv
        torch.set_grad_enabled(grad)
        torch.set_num_threads(threads)
    return ns, out.getvalue()


def test_ch13_speed_claims_are_medians_of_alternated_rounds(ch13_run):
    """Chapter 13's contenders run in turn within each round and the medians are printed, with the rounds,
    the threads and the machine's load; each printed ratio is the ratio of those medians. Timed once each,
    one after the other, int8 / fp32 reads anything from 0.78x to 2.01x on a loaded machine."""
    import statistics
    ns, out = ch13_run
    times, runs, speed, speeds = ns["times"], ns["runs"], ns["speed"], ns["speeds"]
    assert set(times) == {"fp32", "int8 plain", "int8 kernel", "int4 plain", "int4 kernel"}
    for name in times:
        assert len(runs[name]) == ns["ROUNDS"] >= 5 and times[name] == statistics.median(runs[name])
    for name in ("fp32", "int8", "int4"):
        assert len(speeds[name]) == ns["DECODE_ROUNDS"] >= 3 and speed[name] == statistics.median(speeds[name])
    for mode in ("int8", "int4"):
        tp, tk = times[f"{mode} plain"], times[f"{mode} kernel"]
        assert (f"plain {tp * 1e3:.3f} ms, kernel {tk * 1e3:.3f} ms ({times['fp32'] / tk:.1f}x fp32's speed)") in out
        assert (f"decode {speed[mode]:.1f} tokens/s ({speed[mode] / speed['fp32']:.2f}x fp32)") in out
    assert f"fp32: 4 tokens, decode {speed['fp32']:.1f} tokens/s" in out
    for rounds, load in ((ns["ROUNDS"], ns["load_kernels"]), (ns["DECODE_ROUNDS"], ns["load_decode"])):
        assert (f"({rounds} rounds, the contenders in turn within each, medians; the machine's load: {load:.1f} "
                f"(1-minute average), {__import__('os').cpu_count()} CPUs)\n  (timed with ") in out


def test_ch13_alternates_the_contenders_within_each_round(ch13_run):
    ns, _ = ch13_run
    order = []
    medians, runs = ns["alternated"]({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, 3, calls=2)
    assert order == ["a", "b"] + ["a", "a", "b", "b"] * 3                 # a warm-up each, then in turn
    assert set(medians) == {"a", "b"} and all(len(r) == 3 for r in runs.values())


def test_half_a_step_allows_fp32s_own_rounding_on_a_full_size_weight():
    """A slack of 1e-9 absolute is below fp32's spacing at |w| = 0.1, and would make chapter 13 print
    'within half a step everywhere: False' on the full-size checkpoint. On a random weight of gate_proj's
    full shape the 1e-9 check fails; the slack tied to fp32's spacing holds, and still catches a code one off."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(3584, 1024, generator=g) * 0.03                     # (out, in), |w| up to 0.16
    q, scale = quant.quantize_int8(w)
    w8 = quant.dequantize_int8(q, scale)
    assert not bool(((w - w8).abs() <= scale[:, None] / 2 + 1e-9).all())   # the old check: False here
    assert quant.within_half_step(w, w8, scale)
    off = w8.clone()
    off[7, 3] = w[7, 3] + scale[7] / 2 * (1 + 1e-4)                    # a ten-thousandth past half a step: caught
    assert not quant.within_half_step(w, off, scale)
    q4, scale4 = quant.quantize_int4(w, 128)
    w4 = quant.dequantize_int4(q4, scale4)
    assert quant.within_half_step(w, w4, scale4)
    assert not quant.within_half_step(w, quant.dequantize_int4(q4.roll(1, dims=1), scale4), scale4)


def test_ch13_half_step_line_is_the_library_check(ch13_run):
    ns, _ = ch13_run
    assert ns["half_step_ok"] is quant.within_half_step(ns["w"], ns["w8"], ns["scale8"]) is True


@pytest.mark.parametrize("mode", quant.MODES)
def test_ch09_quantized_prints_the_logits_scale_and_a_tolerance_from_it(tiny_path, mode):
    """`9 --quant int8` prints the logits' size, the difference as a share of it, and the tolerance bf16's
    rounding gives: 'max |difference| = 5.0e-01' alone, said to agree 'to bf16's rounding', has no scale."""
    import math
    from test_published import _chapter
    ns, out = _chapter("ch09_generate.py", tiny_path, "--quant", mode, "--max-new-tokens", "4")
    scale = ns["recomputed"].abs().max().item()
    layers = ns["cfg"].num_hidden_layers + 1
    assert ns["logit_scale"] == scale > 0 and ns["rounding_layers"] == layers
    assert ns["quant_tolerance"] == pytest.approx(2 ** -8 * scale * math.sqrt(layers), rel=1e-12)
    assert ns["within_tolerance"] == (ns["cache_gap"] <= ns["quant_tolerance"])
    assert (f"(the logits are up to {scale:.2f} in size: the difference is {ns['cache_gap'] / scale:.2%} of that"
            in out)
    assert f"2^-8 x {scale:.2f} x sqrt({layers}) = {ns['quant_tolerance']:.2e}; within it: {ns['within_tolerance']})" in out


def test_ch13_measures_each_model_on_the_path_it_decodes_with(tiny_path, monkeypatch):
    """Each model's measured logits are the ones its own greedy decoding computes, bit for bit, wherever
    its reply still agrees with fp32's: read as a whole text, over KERNEL_ROWS rows, int8 would take the
    plain fp32 path, while its decoding (one token a call) uses the kernel."""
    from qwen.generate import generate_ids
    from qwen.model import Qwen35
    from test_published import _chapter
    ns, _ = _chapter("ch13_quantize.py", tiny_path, "--tokens", "16")
    ids, ref, V = ns["ids"], ns["ref_ids"], ns["V"]
    assert len(ids) + len(ref) - 1 > quantized.KERNEL_ROWS                  # a whole-text read would take the plain path
    forward, seen = Qwen35.forward, []

    def spy(self, *args, **kwargs):
        out = forward(self, *args, **kwargs)
        seen.append(out[0, -1, :V].clone())
        return out
    monkeypatch.setattr(Qwen35, "forward", spy)
    for mode, m in ns["models"].items():
        seen.clear()
        own = list(generate_ids(m, ids, max_new_tokens=len(ref), vocab=V))
        agree = next((j for j, (a, b) in enumerate(zip(own, ref)) if a != b), len(ref))
        assert agree >= 2, (mode, own, ref)                               # a prefill and decode steps to compare
        rows = min(agree + 1, len(ref))                                   # row j: after reading ref[:j] = own[:j]
        assert torch.equal(ns["measured"][mode][:rows], torch.stack(seen[:rows])), mode
    monkeypatch.setattr(Qwen35, "forward", forward)
    whole = ns["models"]["int8"](torch.tensor([ids + ref[:-1]]))[0, len(ids) - 1:, :V]   # the text read at once
    assert not torch.equal(whole, ns["measured"]["int8"])                 # the plain path: other numbers


def test_what_the_docs_say_the_kernels_return_is_what_they_return():
    """The docs say the kernel's result comes back bf16 (the layer casts it), as it does, not 'fp32'."""
    import re
    from conftest import ROOT
    w = _weight(64, 256)
    q, scale = quant.quantize_int8(w)
    x = torch.randn(1, 256).bfloat16()
    got = {torch.bfloat16: "bf16", torch.float32: "fp32"}[torch._weight_int8pack_mm(x, q, scale.bfloat16()).dtype]
    with quantized.kernels():
        layer = quant.Int4Linear.from_weight(w)
    assert layer.kernel
    assert torch.ops.aten._weight_int4pack_mm_for_cpu(x, layer.packed, layer.group, layer.scale_zero).dtype == torch.bfloat16
    chapter = (ROOT / "ch13_quantize.py").read_text(encoding="utf-8")
    for text in (" ".join(quantized.__doc__.split()), " ".join(chapter.split())):
        said = re.findall(r"the result comes back (?:in )?(\w+)", text)
        assert said and set(said) == {got}, said
        # bf16 inputs are needed on CPUs with native bf16 too (fp32 x: 17.4 against 0.33 ms on one with AMX)
        assert "AVX512-BF16" in text and "On a CPU without native bf16 they are fast only" not in text


def test_ch13_promises_no_ratio_section_4_does_not_print(ch13_run):
    """The introduction promised '4x or 8x fewer bytes'; the int4 model reads 5.7x fewer at full size (the
    scales, the int8 output layer and the fp32 norms stay), as section 4 prints. No 'Nx' promise is left
    in the introduction that the table could contradict, and the table's int4 ratio is under 8."""
    import re
    from conftest import ROOT
    ns, _ = ch13_run
    intro = (ROOT / "ch13_quantize.py").read_text(encoding="utf-8").split("# %%\n")[0]
    assert not re.search(r"\d+x or \d+x fewer|\b8x fewer|1/8。", intro)
    m = ns["models"]["int4"]
    assert ns["fp32_bytes"] / sum(ns["parts"](m)) < 8


def test_ch13_holds_one_full_precision_model(tiny_path, monkeypatch):
    """Chapter 13 holds one fp32 model (to compare with): the quantized models are read from the file
    (load_quantized, the same numbers as quantizing a loaded model: tested above) and share their int8
    table. Three fp32 models, one for each, would peak at 7.7 GB at full size."""
    import qwen.model
    from test_published import _chapter
    loads, load_model = [], qwen.model.load_model
    monkeypatch.setattr(qwen.model, "load_model", lambda *a, **k: loads.append(a) or load_model(*a, **k))
    ns, _ = _chapter("ch13_quantize.py", tiny_path, "--tokens", "3")
    assert len(loads) == 1                                                # the fp32 model the chapter compares with
    int8, int4 = ns["models"]["int8"], ns["models"]["int4"]
    assert int8.output_layer is int4.output_layer is int4.embed_tokens.table
    assert int8.output_layer.q.data_ptr() == int4.embed_tokens.table.q.data_ptr()
    for mode, m in ns["models"].items():                                  # what quantize_model makes of the fp32 one
        with quantized.kernels():
            again = quant.quantize_model(load_model(tiny_path, vision=False), mode)
        state, other = m.state_dict(), again.state_dict()
        assert state.keys() == other.keys() and all(torch.equal(state[k], other[k]) for k in state), mode


def test_load_quantized_can_share_another_models_table(tiny_path):
    int8 = quantized.load_quantized(tiny_path, "int8")
    alone = quantized.load_quantized(tiny_path, "int4")
    shared = quantized.load_quantized(tiny_path, "int4", share=int8)
    assert shared.output_layer is int8.output_layer is shared.embed_tokens.table
    a, b = alone.state_dict(), shared.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert shared.unused == alone.unused and shared.stored == alone.stored
