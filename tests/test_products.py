"""engine/products.py, the kernel behind qwen/linear.py's seam: each few-row path computes what F.linear
does (to fp32 rounding), the calls it declines run F.linear itself, a product that wants a gradient keeps
it, and `with fast():` around a model's forward gives the plain logits and the same greedy ids."""
import platform

import pytest
import torch
import torch.nn.functional as F

from engine import products
from qwen import linear as seam
from qwen.generate import generate_ids
from qwen.model import load_model


def _pair(out_f, in_f, rows, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(out_f, in_f, generator=g), torch.randn(1, rows, in_f, generator=g)


@pytest.fixture
def two_threads():
    """oneDNN serves one row only on 2 threads or more (on one, the BLAS's own product is as fast)."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("rows, shape, want", [
    (1, (1024, 1024), "onednn"), (2, (1024, 1024), "turned"), (4, (2048, 1024), "turned"),
    (2, (1024, 2048), "onednn"), (4, (1024, 2048), "onednn"),             # more inputs than outputs
    (5, (2048, 1024), "onednn"), (16, (1024, 1024), "onednn"),
    (17, (1024, 1024), "declined"), (40, (1024, 1024), "declined")])
def test_each_path_equals_f_linear(rows, shape, want, two_threads):
    """Which path each call takes (a tall weight at 2 to 4 rows turned around, every other call up to
    FEW_ROWS in oneDNN, more rows declined) and that the kernel's result is F.linear's to fp32 rounding."""
    w, x = _pair(*shape, rows)
    onednn = products.onednn_available()
    expected = {"onednn": products.onednn_linear if onednn else products.few_rows_linear if rows > 1 else F.linear,
                "turned": products.few_rows_linear, "declined": F.linear}[want]
    assert products.path(x, w) is expected
    got, plain = products.fast_product(x, w), F.linear(x, w)
    if expected is F.linear:
        assert got is None                                                  # declined: the lesson's F.linear
        return
    assert got.shape == plain.shape == (1, rows, shape[0]) and got.dtype == torch.float32
    torch.testing.assert_close(got, plain, atol=1e-4, rtol=1e-5)           # sums of 1024-2048 products of size ~1


def test_onednn_takes_a_1d_row_and_a_transposed_input():
    w, x = _pair(2048, 512, 3, seed=1)
    assert products.onednn_linear(x[0, 0], w).shape == (2048,)           # a 1-D row, as the MTP head's guess
    torch.testing.assert_close(products.onednn_linear(x[0, 0], w), F.linear(x[0, 0], w), atol=1e-4, rtol=1e-5)
    column = x[0, :1].reshape(512, 1).t()                                 # (1, 512), not contiguous
    torch.testing.assert_close(products.linear(column, w), F.linear(column, w), atol=1e-4, rtol=1e-5)


def test_onednn_is_found_on_x86():
    """If this fails on x86, one-row products fall back to F.linear and decoding loses its speed
    without any other test noticing."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("oneDNN's one-row product is used on x86 only")
    assert products.onednn_available()


def test_without_onednn_or_on_one_thread_one_row_is_declined(monkeypatch, two_threads):
    w, x = _pair(1024, 1024, 1)
    torch.set_num_threads(1)
    assert products.fast_product(x, w) is None
    torch.set_num_threads(2)
    monkeypatch.setattr(products, "onednn_available", lambda: False)
    assert products.fast_product(x, w) is None
    w, x = _pair(1024, 2048, 5)                                          # a call oneDNN would take: turned
    assert products.path(x, w) is products.few_rows_linear


@pytest.mark.parametrize("case", ["small weight", "bias", "fp64", "wrong width", "bf16 one row"])
def test_calls_it_declines_run_f_linear(case, two_threads, monkeypatch):
    w, x = _pair(1024, 1024, 1)
    bias = None
    if case == "small weight":
        w = w[:16]                                                        # a gate's size: under MIN_VALUES
    elif case == "bias":
        bias = torch.zeros(1024)
    elif case == "fp64":
        w, x = w.double(), x.double()
    elif case == "wrong width":
        x = x[..., :1000]
    else:                                                                # one bf16 row where the CPU emulates
        w, x = w.bfloat16(), x.bfloat16()                                 # bf16: bf16's own product
        monkeypatch.setattr(products.upcast, "emulated_bf16", lambda: True)
    assert products.fast_product(x, w, bias) is None
    if case == "wrong width":                                            # so the error is F.linear's own
        with pytest.raises(RuntimeError), products.fast():
            seam.product(x, w, bias)
    else:
        with products.fast():
            assert torch.equal(seam.product(x, w, bias), F.linear(x, w, bias))


@pytest.mark.parametrize("rows", [1, 4, 5])
def test_a_product_that_wants_a_gradient_is_declined_and_keeps_it(rows, two_threads):
    """oneDNN's inner product has no backward: with autograd on and a gradient wanted, the call runs
    F.linear (1 and 5 rows would go to oneDNN, 4 rows of this square weight would be turned around)."""
    w, x = _pair(1024, 1024, rows, seed=3)
    w.requires_grad_(True)
    x.requires_grad_(True)
    assert products.fast_product(x, w) is None
    with products.fast():
        seam.product(x, w).square().sum().backward()
    got_w, got_x, w.grad, x.grad = w.grad, x.grad, None, None
    F.linear(x, w).square().sum().backward()
    torch.testing.assert_close(got_w, w.grad, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(got_x, x.grad, atol=1e-4, rtol=1e-5)
    with torch.no_grad():                                                # no gradient wanted: taken again
        assert products.fast_product(x, w) is not None


def test_the_kernel_is_installed_only_inside_fast(two_threads):
    w, x = _pair(1024, 1024, 2)
    calls = []
    with seam.kernel(lambda *a: calls.append(1)):                         # a kernel that declines everything
        with products.fast():
            seam.product(x, w)
        seam.product(x, w)
    assert calls == [1]                                                  # fast_product took the first call
    assert seam._kernels == []


def test_fast_around_a_model_gives_the_plain_logits_and_greedy_ids(tiny_path, monkeypatch, two_threads):
    """The tiny checkpoint's weights are under MIN_VALUES: the floor is lowered so that every product
    of the model, the output layer's included, goes through a fast path."""
    model = load_model(tiny_path)
    monkeypatch.setattr(products, "MIN_VALUES", 1)
    taken, real = [], products.linear
    monkeypatch.setattr(products, "linear", lambda x, w: taken.append(x.shape[:-1]) or real(x, w))
    prompt = [5, 17, 99, 250, 31, 7]
    with torch.no_grad():
        ids = torch.tensor([prompt])
        plain_logits = model(ids[:, :1])
        plain_ids = list(generate_ids(model, prompt, max_new_tokens=8))
        assert taken == []
        with products.fast():
            fast_logits = model(ids[:, :1])
            fast_ids = list(generate_ids(model, prompt, max_new_tokens=8))
    assert taken                                                         # the fast paths did run
    torch.testing.assert_close(fast_logits, plain_logits, atol=1e-5, rtol=1e-4)
    assert fast_ids == plain_ids
    assert "forward" not in vars(model.layers[0].mlp.up_proj) and "logits" not in vars(model)
