"""qwen/products.py: generation's few-row products compute what F.linear does (to fp32 rounding),
are used only inside fast_products, only for large fp32 CPU weights, and leave the model as it was."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from qwen import products
from qwen.generate import generate_ids
from qwen.model import load_model


def _pair(out_f, in_f, rows, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(out_f, in_f, generator=g), torch.randn(1, rows, in_f, generator=g)


@pytest.mark.parametrize("rows", [1, 2, 5, 16, 17, 40])
def test_each_path_computes_what_f_linear_does(rows):
    w, x = _pair(1024, 1024, rows)
    got, want = products.linear(x, w), F.linear(x, w)
    assert got.shape == want.shape == (1, rows, 1024) and got.dtype == torch.float32
    assert torch.allclose(got, want, atol=1e-4, rtol=1e-5)              # sums of 1024 products of size ~1


def test_one_row_any_shape_and_a_transposed_input():
    w, x = _pair(2048, 512, 1, seed=1)
    assert products.one_row_linear(x[0, 0], w).shape == (2048,)          # a 1-D row, as the MTP head's guess
    assert torch.allclose(products.one_row_linear(x[0, 0], w), F.linear(x[0, 0], w), atol=1e-4, rtol=1e-5)
    column = x.reshape(512, 1).t()                                        # (1, 512), not contiguous
    assert torch.allclose(products.linear(column, w), F.linear(column, w), atol=1e-4, rtol=1e-5)


def test_onednn_is_found_here():
    """This x86 build of torch has oneDNN (CI's torch 2.13 CPU wheel and the CUDA wheels do): if this fails,
    one-row products fall back to F.linear and decoding loses its speed without any other test noticing."""
    import platform
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("oneDNN's one-row product is used on x86 only")
    assert products.onednn_available()


def test_without_onednn_one_row_is_f_linear(monkeypatch):
    monkeypatch.setattr(products, "onednn_available", lambda: False)
    monkeypatch.setattr(products, "one_row_linear", lambda *a: pytest.fail("oneDNN used"))
    w, x = _pair(1024, 1024, 1)
    assert torch.equal(products.linear(x, w), F.linear(x, w))


class _Stand(nn.Module):
    """Layers of every kind fast_products must tell apart, and an output layer."""

    def __init__(self):
        super().__init__()
        self.big = nn.Linear(1024, 1024, bias=False)                     # 1M values: taken
        self.small = nn.Linear(1024, 16, bias=False)                     # the gates' size: kept
        self.biased = nn.Linear(1024, 1024)                              # a bias: kept
        self.half = nn.Linear(1024, 1024, bias=False).to(torch.bfloat16)  # bf16: kept (qwen/upcast.py)
        self.output_weight = nn.Parameter(torch.randn(2048, 1024))
        self.output_layer = None

    def logits(self, h):
        return F.linear(h, self.output_weight).float()


def test_fast_products_takes_only_large_fp32_layers_and_puts_them_back(monkeypatch):
    model, seen = _Stand(), []
    real = products.linear
    monkeypatch.setattr(products, "linear", lambda x, w: seen.append(tuple(w.shape)) or real(x, w))
    x = torch.randn(1, 1, 1024)
    plain = {n: m(x if m.weight.dtype == torch.float32 else x.bfloat16()) for n, m in model.named_children()}
    with products.fast_products(model):
        fast = {n: m(x if m.weight.dtype == torch.float32 else x.bfloat16()) for n, m in model.named_children()}
        model.logits(x[0, 0])
    assert seen == [(1024, 1024), (2048, 1024)]                          # big, then the output layer; no other
    for n in plain:
        assert torch.allclose(fast[n].float(), plain[n].float(), atol=1e-4, rtol=1e-5), n
    assert all("forward" not in m.__dict__ for m in model.modules()) and "logits" not in model.__dict__
    seen.clear()
    model.big(x), model.logits(x)
    assert seen == []                                                    # outside: the plain layers


def test_layers_are_put_back_when_the_body_raises():
    model = _Stand()
    with pytest.raises(KeyboardInterrupt):
        with products.fast_products(model):
            assert "forward" in model.big.__dict__
            raise KeyboardInterrupt
    assert "forward" not in model.big.__dict__ and "logits" not in model.__dict__


def test_a_quantized_output_layer_is_left_alone():
    model = _Stand()
    model.output_layer = nn.Identity()                                   # qwen/quant.py sets one
    with products.fast_products(model):
        assert "logits" not in model.__dict__


def test_generation_reads_through_it_and_gives_the_plain_tokens(tiny_path, monkeypatch):
    """With the size floor lowered, the tiny checkpoint's layers go through every path (1 row while
    decoding, a few in a short prompt): the same greedy tokens as the model called plainly."""
    model = load_model(tiny_path)
    prompt = [5, 17, 99, 250, 31]
    cache, plain = model.new_cache(), []
    logits = model(torch.tensor([prompt]), cache=cache, last=True)[0, -1]
    for _ in range(12):
        plain.append(int(logits.argmax()))
        logits = model(torch.tensor([[plain[-1]]]), cache=cache, last=True)[0, -1]
    rows = []
    real = products.linear
    monkeypatch.setattr(products, "MIN_VALUES", 1)
    monkeypatch.setattr(products, "linear", lambda x, w: rows.append(x.numel() // x.shape[-1]) or real(x, w))
    assert list(generate_ids(model, prompt, max_new_tokens=12)) == plain
    assert 1 in rows and len(prompt) in rows                             # decode steps and the prompt
    assert all("forward" not in m.__dict__ for m in model.modules())
