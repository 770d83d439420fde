"""engine/packed.py: a bf16 product on a weight packed once is F.linear's to the bit, at every row count; a
weight changed in place is packed again; calls it cannot serve are declined; the packed copy goes with its
weight; and a model read inside `fast()` gives the plain bf16 model's logits."""
import gc

import pytest
import torch
import torch.nn.functional as F

from engine import packed, products
from qwen.linear import product

needs = pytest.mark.skipif(not packed.available(), reason="this CPU or torch has no packed bf16 product")


def _bf16(*shape, seed=0):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 0.05).to(torch.bfloat16)


@needs
@pytest.mark.parametrize("rows", [1, 3, 16, 130])
def test_the_packed_product_is_f_linears_to_the_bit(rows):
    w, x, b = _bf16(96, 64), _bf16(2, rows, 64, seed=1), _bf16(96, seed=2)
    assert packed.takes(x, w) == (2 * rows <= packed.PACK_ROWS)              # a prompt does not pack a weight,
    packed.linear(x[:1, :1], w)                                              # a decode step does; then every
    assert packed.takes(x, w)                                                # call of that weight is packed
    assert torch.equal(packed.linear(x, w), F.linear(x, w))
    assert torch.equal(packed.linear(x, w, b), F.linear(x, w, b))
    assert packed.linear(x[0, 0], w).shape == (96,)                          # a 1-D row keeps its shape


@needs
def test_a_weight_packed_in_blocks_of_rows_gives_the_same_numbers(monkeypatch):
    monkeypatch.setattr(packed, "BLOCK", 40 * 64)                            # 40 rows a block: 40, 40, 16
    w, x, b = _bf16(96, 64), _bf16(5, 64, seed=1), _bf16(96, seed=2)
    assert [(a, e) for a, e, _ in packed.packed(w)] == [(0, 40), (40, 80), (80, 96)]
    assert torch.equal(packed.linear(x, w, b), F.linear(x, w, b))


@needs
def test_a_weight_changed_in_place_is_packed_again():
    w, x = _bf16(48, 32), _bf16(1, 32, seed=1)
    before = packed.linear(x, w)
    with torch.no_grad():
        w.mul_(2)
    assert torch.equal(packed.linear(x, w), F.linear(x, w)) and not torch.equal(packed.linear(x, w), before)
    w.data.mul_(2)                                                          # not counted by torch: forget()
    packed.forget()
    assert torch.equal(packed.linear(x, w), F.linear(x, w))



@needs
def test_a_weight_given_other_values_under_the_same_tensor_is_packed_again():
    x = _bf16(1, 32, seed=1)
    p = torch.nn.Parameter(_bf16(48, 32), requires_grad=False)
    packed.linear(x, p)
    p.data = _bf16(48, 32, seed=3)                                           # the same object, other values
    assert torch.equal(packed.linear(x, p), F.linear(x, p))
    layer = torch.nn.Linear(32, 48, bias=False).bfloat16().requires_grad_(False)
    packed.linear(x, layer.weight)
    layer.float()                                                            # module.to sets p.data
    layer.weight.data = _bf16(48, 32, seed=4).float()                        # no version counted
    layer.bfloat16()                                                         # maybe at the old address
    assert torch.equal(packed.linear(x, layer.weight), F.linear(x, layer.weight))


def test_an_inference_tensor_is_declined():
    with torch.inference_mode():
        w, x = _bf16(48, 32), _bf16(1, 32, seed=1)
        assert not packed.takes(x, w)                                         # it counts no versions
        with products.fast():
            assert torch.equal(product(x, w), F.linear(x, w))                # F.linear's numbers, no error

@needs
def test_the_packed_copy_goes_with_its_weight():
    w = _bf16(48, 32)
    packed.linear(_bf16(1, 32), w)
    key = id(w)
    assert key in packed._packed
    del w
    gc.collect()
    assert key not in packed._packed


def test_calls_it_cannot_serve_are_declined():
    w, x = _bf16(48, 32), _bf16(1, 32)
    assert not packed.takes(x.float(), w.float())                             # fp32: engine/products.py's paths
    assert not packed.takes(x, w.float()) and not packed.takes(_bf16(1, 31), w)   # F.linear's own errors
    assert not packed.takes(x, w, torch.zeros(48))                            # an fp32 bias: F.linear raises
    wanted = w.clone().requires_grad_()
    assert not packed.takes(x, wanted)                                        # oneDNN's product has no backward
    with torch.no_grad():
        assert packed.takes(x, wanted) == packed.available()


def test_only_where_the_cpu_has_bf16_arithmetic(monkeypatch):
    monkeypatch.setattr(packed.upcast, "emulated_bf16", lambda: True)
    assert not packed.available() and not packed.takes(_bf16(1, 32), _bf16(48, 32))


def test_anonymous_memory_is_not_file_backed_and_a_mapped_file_is(tmp_path):
    import mmap
    assert not packed._file_backed(torch.zeros(1 << 20).data_ptr())
    f = tmp_path / "w.bin"
    f.write_bytes(bytes(1 << 16))
    with open(f, "rb") as h:
        m = mmap.mmap(h.fileno(), 0, access=mmap.ACCESS_COPY)
        t = torch.frombuffer(m, dtype=torch.bfloat16)
        assert packed._file_backed(t.data_ptr())
        packed._hand_back(t)                                                  # pages dropped, values kept
        assert int(t.float().abs().sum()) == 0
        del t
        m.close()


@needs
def test_a_bf16_model_inside_fast_gives_the_plain_models_logits(tiny_path):
    from qwen.model import load_model
    model = load_model(tiny_path, dtype=torch.bfloat16, vision=False)
    ids = torch.tensor([[1, 5, 9, 200, 7]])
    with torch.no_grad():
        plain = model(ids)
        with products.fast():
            fast = model(ids)
        cache, cached = model.new_cache(), []
        with products.fast():
            model(ids[:, :4], cache=cache)
            cached = model(ids[:, 4:], cache=cache)
    assert torch.equal(fast, plain)
    torch.testing.assert_close(cached[0, -1], plain[0, -1], atol=2e-2, rtol=2e-2)


def test_the_line_under_a_timing_names_the_path_a_decode_step_takes(monkeypatch):
    big = torch.zeros(1024, 1024)
    assert products.described(big.bfloat16()) == products.described(torch.zeros(4, 4).bfloat16())  # the CPU decides
    bf16 = products.described(big.bfloat16())
    assert ("packed" in bf16) == packed.available()
    monkeypatch.setattr(packed.upcast, "emulated_bf16", lambda: True)
    assert products.described(big.bfloat16()) != bf16 or not packed.available()
    monkeypatch.setattr(products.torch, "get_num_threads", lambda: 2)
    assert ("oneDNN" in products.described(big)) == products.onednn_available()
    assert "oneDNN" not in products.described(torch.zeros(16, 1024))         # under MIN_VALUES: F.linear


@needs
def test_a_write_through_data_that_changes_the_sampled_values_is_seen():
    w, x = _bf16(48, 32), _bf16(1, 32, seed=1)
    packed.linear(x, w)
    w.data.mul_(2)                                                          # torch does not count it
    assert torch.equal(packed.linear(x, w), F.linear(x, w))


@needs
def test_prepare_packs_what_decoding_would_and_nothing_else(tiny_path):
    from qwen.model import load_model
    model = load_model(tiny_path, dtype=torch.bfloat16, vision=False)
    packed.forget()
    n = packed.prepare(model)
    linears = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert n == len(linears) + 1 and all(id(w) in packed._packed for w in linears)   # + the tied output layer
    assert packed.prepare(load_model(tiny_path, vision=False)) == 0                   # fp32: nothing
