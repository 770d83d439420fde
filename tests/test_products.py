"""engine/products.py: generation's few-row products compute what F.linear does (to fp32 rounding),
are used only inside FastProducts, only for large fp32 CPU weights, and leave the model as it was."""
import functools
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from engine import products
from qwen.generate import generate_ids
from qwen.model import load_model
from qwen.mtp import speculative_ids


def _pair(out_f, in_f, rows, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(out_f, in_f, generator=g), torch.randn(1, rows, in_f, generator=g)


@pytest.fixture
def two_threads():
    """oneDNN serves one row only on 2 threads or more (on one, MKL's own product is as fast)."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("rows, shape, path", [
    (1, (1024, 1024), "onednn"), (2, (1024, 1024), "turned"), (4, (2048, 1024), "turned"),
    (2, (1024, 2048), "onednn"), (4, (1024, 2048), "onednn"),             # more inputs than outputs
    (5, (2048, 1024), "onednn"), (16, (1024, 1024), "onednn"),
    (17, (1024, 1024), "F.linear"), (40, (1024, 1024), "F.linear")])
def test_each_path_computes_what_f_linear_does(rows, shape, path, two_threads, monkeypatch):
    """Which path each call takes (module docstring: a tall weight at 2 to 4 rows is turned around,
    every other call up to FEW_ROWS goes to oneDNN), and that each computes what F.linear does."""
    w, x = _pair(*shape, rows)
    available, used = products.onednn_available(), []                   # (its probe, before counting)
    for name in ("onednn_linear", "few_rows_linear"):
        real = getattr(products, name)
        monkeypatch.setattr(products, name, lambda *a, real=real, name=name: used.append(name) or real(*a))
    got, want = products.linear(x, w), F.linear(x, w)
    expected = {"onednn": ["onednn_linear"] if available else ["few_rows_linear"] if rows > 1 else [],
                "turned": ["few_rows_linear"], "F.linear": []}[path]
    assert used == expected
    assert got.shape == want.shape == (1, rows, shape[0]) and got.dtype == torch.float32
    assert torch.allclose(got, want, atol=1e-4, rtol=1e-5)              # sums of 1024-2048 products of size ~1


def test_onednn_any_shape_and_a_transposed_input():
    w, x = _pair(2048, 512, 3, seed=1)
    assert products.onednn_linear(x[0, 0], w).shape == (2048,)           # a 1-D row, as the MTP head's guess
    assert torch.allclose(products.onednn_linear(x[0, 0], w), F.linear(x[0, 0], w), atol=1e-4, rtol=1e-5)
    assert torch.allclose(products.onednn_linear(x, w), F.linear(x, w), atol=1e-4, rtol=1e-5)   # (1, 3, 2048)
    column = x[0, :1].reshape(512, 1).t()                                 # (1, 512), not contiguous
    assert torch.allclose(products.linear(column, w), F.linear(column, w), atol=1e-4, rtol=1e-5)


def test_onednn_is_found_here():
    """This x86 build of torch has oneDNN (CI's torch 2.13 CPU wheel and the CUDA wheels do): if this fails,
    one-row products fall back to F.linear and decoding loses its speed without any other test noticing."""
    import platform
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("oneDNN's one-row product is used on x86 only")
    assert products.onednn_available()


def test_without_onednn_one_row_is_f_linear(monkeypatch, two_threads):
    monkeypatch.setattr(products, "onednn_available", lambda: False)
    monkeypatch.setattr(products, "onednn_linear", lambda *a: pytest.fail("oneDNN used"))
    w, x = _pair(1024, 1024, 1)
    assert torch.equal(products.linear(x, w), F.linear(x, w))
    w, x = _pair(1024, 2048, 5)                                         # a call oneDNN would take: turned
    assert torch.allclose(products.linear(x, w), F.linear(x, w), atol=1e-4, rtol=1e-5)


def test_on_one_thread_one_row_is_f_linear(monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.setattr(products, "onednn_linear", lambda *a: pytest.fail("oneDNN used"))
    w, x = _pair(1024, 1024, 1)
    try:
        torch.set_num_threads(1)
        assert torch.equal(products.linear(x, w), F.linear(x, w))
    finally:
        torch.set_num_threads(before)


class _Stand(nn.Module):
    """Layers of every kind FastProducts must tell apart, and an output layer."""

    def __init__(self):
        super().__init__()
        self.big = nn.Linear(1024, 1024, bias=False)                     # 1M values: taken
        self.small = nn.Linear(1024, 16, bias=False)                     # the gates' size: kept
        self.biased = nn.Linear(1024, 1024)                              # a bias: kept
        self.half = nn.Linear(1024, 1024, bias=False).to(torch.bfloat16)  # bf16: kept (engine/upcast.py)
        self.output_weight = nn.Parameter(torch.randn(2048, 1024))
        self.output_layer = None

    def logits(self, h):
        return F.linear(h, self.output_weight).float()


def test_fast_products_take_only_large_fp32_layers_and_puts_them_back(monkeypatch):
    model, seen = _Stand(), []
    real = products.linear
    monkeypatch.setattr(products, "linear", lambda x, w: seen.append(tuple(w.shape)) or real(x, w))
    x = torch.randn(1, 1, 1024)
    plain = {n: m(x if m.weight.dtype == torch.float32 else x.bfloat16()) for n, m in model.named_children()}
    with products.FastProducts(model):
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
        with products.FastProducts(model):
            assert "forward" in model.big.__dict__
            raise KeyboardInterrupt
    assert "forward" not in model.big.__dict__ and "logits" not in model.__dict__


def test_a_quantized_output_layer_is_left_alone():
    model = _Stand()
    model.output_layer = nn.Identity()                                   # qwen/quant.py sets one
    with products.FastProducts(model):
        assert "logits" not in model.__dict__


def test_generation_reads_through_it_and_gives_the_plain_tokens(tiny_path, monkeypatch, two_threads):
    """With the size floor lowered, the tiny checkpoint's layers go through every path (1 row while
    decoding, oneDNN on 2 threads; a few in a short prompt): the same greedy tokens as the model called
    plainly."""
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
    products.onednn_available()                                          # (its probe, before counting)
    onednn, real_onednn = [], products.onednn_linear
    monkeypatch.setattr(products, "onednn_linear", lambda *a: onednn.append(1) or real_onednn(*a))
    with products.fast():                                       # the engine's kernel, through qwen/linear.py
        assert list(generate_ids(model, prompt, max_new_tokens=12)) == plain
    assert 1 in rows and len(prompt) in rows                             # decode steps and the prompt
    assert onednn or not products.onednn_available()
    assert all("forward" not in m.__dict__ for m in model.modules())


def test_a_learners_output_layer_runs_in_generation_and_stays(tiny_path):
    """--mine's 203 (practice/mine.py) puts the learner's tied_logits on the model instance: generation
    must run it (not bypass it with its own), and leave it there for Mine.remove to take out."""
    from practice import mine
    model, calls = load_model(tiny_path, vision=False), []
    found = mine.Solutions({"203": {"embed": lambda ids, w: F.embedding(ids, w),
                                    "tied_logits": lambda h, w: calls.append(h.shape) or F.linear(h, w)}}, [], "")
    yours = mine.Mine(model, found)
    assert products.takes(model.output_weight)                          # the tiny output layer is taken too
    assert len(list(generate_ids(model, [5, 17, 99], max_new_tokens=4))) == 4
    assert len(calls) == 4 and "logits" in vars(model)                   # the prompt and 3 decode steps
    yours.remove()
    assert "logits" not in vars(model)


def test_a_forward_already_on_a_layer_runs_and_stays():
    """A layer whose forward was replaced on the instance (a learner's, an adapter's) keeps it."""
    model, seen = _Stand(), []
    theirs = lambda x: seen.append(1) or F.linear(x, model.big.weight) * 2   # noqa: E731
    model.big.forward = theirs
    x = torch.randn(1, 1, 1024)
    with products.FastProducts(model):
        assert torch.allclose(model.big(x), 2 * F.linear(x, model.big.weight))
    assert seen == [1] and model.big.forward is theirs


def test_a_nested_context_leaves_the_outer_ones_layers_in_place(monkeypatch):
    """Two on one model (a generate_ids inside another's step, two threads): the inner one sees the
    outer one's layers in place, leaves them, and removes nothing of theirs."""
    model, seen = _Stand(), []
    real = products.linear
    monkeypatch.setattr(products, "linear", lambda x, w: seen.append(tuple(w.shape)) or real(x, w))
    x = torch.randn(1, 1, 1024)
    with products.FastProducts(model):
        with products.FastProducts(model):
            pass
        model.big(x), model.logits(x)
        assert seen == [(1024, 1024), (2048, 1024)]                      # the outer one's, still on
    assert "forward" not in model.big.__dict__ and "logits" not in model.__dict__


class _Interrupting(list):
    """The layers to put in, with Ctrl-C arriving after the first one is in (the first time through)."""
    hit = False

    def __iter__(self):
        for i, item in enumerate(list.__iter__(self)):
            if i == 1 and not self.hit:
                self.hit = True
                raise KeyboardInterrupt
            yield item


def test_an_interrupt_while_the_layers_go_in_leaves_none_behind():
    model = _Stand()
    model.second = nn.Linear(1024, 1024, bias=False)
    fast = products.FastProducts(model)
    fast.forwards = _Interrupting(fast.forwards)
    assert len(fast.forwards) == 2
    with pytest.raises(KeyboardInterrupt):
        with fast:
            pass
    assert fast.forwards.hit and not any("forward" in m.__dict__ for m in model.modules())


def test_a_weight_swapped_between_steps_runs_f_linear():
    """The layers are found once per run: a weight made bf16 after that (a learner between two
    tokens of a reply) must run as bf16's F.linear does, not reach oneDNN's fp32 product."""
    model = _Stand()
    fast = products.FastProducts(model)
    model.big.weight.data = model.big.weight.data.bfloat16()
    x = torch.randn(1, 1, 1024).bfloat16()
    with fast:
        assert torch.equal(model.big(x), F.linear(x, model.big.weight))


def test_a_call_of_the_wrong_width_or_dtype_raises_f_linears_error():
    """Inside generation a learner's part may hand a layer the wrong input: the error must be
    F.linear's (the shapes, the dtypes), not oneDNN's "could not create a primitive descriptor"."""
    w = torch.randn(1024, 1024)
    for x in (torch.randn(1, 1, 1000), torch.randn(1, 1, 1024).bfloat16(), torch.randn(1, 3, 1000),
              torch.randn(1, 5, 1000), torch.tensor(1.0)):                # (a 0-d x: "need to be at least 1D")
        with pytest.raises(RuntimeError) as want:
            F.linear(x, w)
        with pytest.raises(RuntimeError) as got:
            products.linear(x, w)
        assert str(got.value) == str(want.value)


@pytest.mark.parametrize("rows", [1, 4, 5])
def test_gradients_flow_as_through_f_linear(rows, two_threads):
    """oneDNN's inner product has no backward: with autograd on, a call that needs a gradient runs F.linear
    (without this, one row silently gave x no gradient at all). On 2 threads 1 and 5 rows would go to
    oneDNN, 4 rows of this square weight would be turned around."""
    w, x = _pair(1024, 1024, rows, seed=3)
    x.requires_grad_(True)
    products.linear(x, w).sum().backward()
    got, x.grad = x.grad, None
    F.linear(x, w).sum().backward()
    assert got is not None and torch.allclose(got, x.grad, atol=1e-4, rtol=1e-5)


def test_a_reply_walks_the_model_a_fixed_number_of_times(tiny_path, monkeypatch):
    """FastProducts and the prompt pass look at every module when they are made: generate_ids and
    speculative_ids make each once per reply, so the modules are walked as often for 12 tokens as for 3
    (walked at every step, the full-size text model's 359 modules cost 1.6-2.3 CPU ms of each: the
    newcomer's review)."""
    model = load_model(tiny_path)
    walks, real = [], type(model).modules
    monkeypatch.setattr(type(model), "modules", lambda self: walks.append(1) or real(self))

    def count(decode=generate_ids):
        seen = []
        for n in (3, 12):
            walks.clear()
            list(decode(model, [5, 17, 99], max_new_tokens=n))
            seen.append(len(walks))
        return seen

    assert len(set(count())) == 1
    assert len(set(count(functools.partial(speculative_ids, k=3)))) == 1


def test_the_kernel_seam_gives_the_plain_models_numbers(tiny_path):
    """`with fast():` (engine/products.py behind qwen/linear.py's seam) changes how products are computed,
    not what: a few-row decode step and a prompt give the plain path's logits to fp32 rounding, the
    same greedy ids, and outside the context the plain F.linear runs again."""
    from qwen.generate import generate_ids
    model = load_model(tiny_path, vision=False)
    ids = [3, 17, 99, 250, 8]
    with torch.no_grad():
        plain = model(torch.tensor([ids]))
        with products.fast():
            fast = model(torch.tensor([ids]))
    assert torch.allclose(fast, plain, atol=1e-5, rtol=1e-5)
    want = list(generate_ids(model, ids, max_new_tokens=6))
    with products.fast():
        got = list(generate_ids(model, ids, max_new_tokens=6))
    assert got == want
    w, x = torch.randn(2048, 1024), torch.randn(1, 3, 1024)            # a large weight, three rows
    assert torch.allclose(products.fast_product(x, w), torch.nn.functional.linear(x, w), atol=1e-4, rtol=1e-5)
    assert products.fast_product(x, w.double().float(), torch.zeros(2048)) is None   # a bias: declined
    import qwen.linear
    before = list(qwen.linear._kernels)
    with products.fast():
        assert len(qwen.linear._kernels) == len(before) + 1
    assert qwen.linear._kernels == before                                  # the way out removes it
