"""Chapter 14's lesson (qwen/train.py) against transformers and torch, on checkpoints transformers wrote.

The loss equals Qwen3_5ForCausalLM(input_ids, labels=...)'s; every parameter's gradient equals
transformers' by name (through the delta rule, the conv, the gated norm, attention, the MLP and the
tied output table); the hand-written backward passes gradcheck; AdamW, clipping and the schedule equal
torch's or their formula. Each check is also run on a deliberately wrong variant, which must differ."""
import math

import pytest
import torch

from helpers import write_transformers_checkpoint
from qwen.mlp import MLP
from qwen.model import load_model
from qwen.norm import RMSNorm
from qwen.train import (AdamW, clip_grad_norm, decay_groups, lr_at, next_token_loss, rms_norm, swiglu)

transformers = pytest.importorskip("transformers")


def _redraw(folder):
    """Non-trivial norm weights, dt_bias and A_log (transformers starts the norms at 0, where a
    forgotten `1 +` hides), seeded, in place."""
    from safetensors.torch import load_file, save_file
    file = folder / "model.safetensors"
    tensors = load_file(file)
    g = torch.Generator().manual_seed(1)
    for name, t in sorted(tensors.items()):
        if "norm" in name:
            tensors[name] = (t.float() + 0.3 * torch.randn(t.shape, generator=g)).to(t.dtype)
        elif name.endswith(("dt_bias", "A_log")):                       # decays near 1: gradients well above rounding
            tensors[name] = (0.3 * torch.randn(t.shape, generator=g)).to(t.dtype)
    save_file(tensors, file, metadata={"format": "pt"})
    return folder


@pytest.fixture(scope="module", params=["untied", "tied"])
def pair(request, tmp_path_factory):
    """(ours, transformers') on one fp32 text checkpoint transformers wrote, both trainable."""
    folder = write_transformers_checkpoint(tmp_path_factory.mktemp(request.param), "text", torch.float32,
                                           tied=request.param == "tied")
    _redraw(folder)
    ours = load_model(folder).requires_grad_(True)
    ref = transformers.Qwen3_5ForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    ref.config._attn_implementation = "eager"
    return ours, ref.eval()


def _batch():
    """Two rows of 40 ids; the first 10 labels are a prompt (ignored), the second row ends in 8 pads."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 512, (2, 40), generator=g)
    labels = ids.clone()
    labels[:, :10] = -100
    labels[1, 32:] = -100
    return ids, labels


def test_loss_equals_transformers(pair):
    ours, ref = pair
    ids, labels = _batch()
    with torch.no_grad():
        mine = next_token_loss(ours(ids), labels)
        theirs = ref(input_ids=ids, labels=labels).loss
        shifted = labels[:, 1:]
        over_all = torch.nn.functional.cross_entropy(ours(ids)[:, :-1].flatten(0, 1), shifted.flatten(),
                                                     reduction="sum") / shifted.numel()   # mean over all positions
        unshifted = torch.nn.functional.cross_entropy(ours(ids).flatten(0, 1), labels.flatten())
    assert mine.dtype == torch.float32
    assert abs(mine.item() - theirs.item()) <= 1e-6, (mine.item(), theirs.item())
    assert abs(over_all.item() - theirs.item()) > 1e-1
    assert abs(unshifted.item() - theirs.item()) > 1e-3


def test_loss_on_bf16_logits_is_fp32():
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(2, 9, 300, generator=g) * 4).bfloat16()
    labels = torch.randint(0, 300, (2, 9), generator=g)
    labels[0, :3] = -100
    mine = next_token_loss(logits, labels)
    want = torch.nn.functional.cross_entropy(logits[:, :-1].float().flatten(0, 1), labels[:, 1:].flatten())
    assert mine.dtype == torch.float32 and abs(mine.item() - want.item()) <= 1e-6
    assert next_token_loss(logits, labels, ignore_index=7).item() != mine.item()   # the index is read


def _relative(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp(min=1e-30)).item()


def test_every_gradient_equals_transformers(pair):
    ours, ref = pair
    ids, labels = _batch()
    ours.zero_grad(set_to_none=True)
    ref.zero_grad(set_to_none=True)
    next_token_loss(ours(ids), labels).backward()
    ref(input_ids=ids, labels=labels).loss.backward()
    theirs = {n.removeprefix("model."): p.grad for n, p in ref.named_parameters()}
    mine = dict(ours.named_parameters())
    assert set(mine) == set(theirs)                                  # every parameter, by name
    kinds = set()
    for name, p in mine.items():
        assert p.grad is not None and theirs[name] is not None, name
        assert _relative(p.grad, theirs[name]) <= 1e-4, (name, _relative(p.grad, theirs[name]))
        kinds |= {k for k in ("A_log", "conv1d", "linear_attn.norm", "self_attn", "mlp", "embed_tokens") if k in name}
    assert len(kinds) == 6, kinds
    wrong = {n: p.grad.clone() for n, p in mine.items()}             # a different batch: different gradients
    ours.zero_grad(set_to_none=True)
    next_token_loss(ours(ids), ids).backward()
    assert max(_relative(p.grad, wrong[n]) for n, p in ours.named_parameters()) > 1e-2


def test_rms_norm_backward_passes_gradcheck():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 8, dtype=torch.float64, generator=g, requires_grad=True)
    w = (0.3 * torch.randn(8, dtype=torch.float64, generator=g)).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: rms_norm(a, b, 1e-6), (x, w), eps=1e-6, atol=1e-6)


def test_rms_norm_backward_equals_autograd():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, 16, generator=g, requires_grad=True)
    norm = RMSNorm(16)
    with torch.no_grad():
        norm.weight.normal_(0, 0.3, generator=g)
    dy = torch.randn(4, 6, 16, generator=g)
    x2 = x.detach().clone().requires_grad_(True)
    w2 = norm.weight.detach().clone().requires_grad_(True)
    (norm(x) * dy).sum().backward()
    y = rms_norm(x2, w2, norm.eps)
    (y * dy).sum().backward()
    assert torch.allclose(y, norm(x), atol=1e-6)
    assert torch.allclose(x2.grad, x.grad, atol=1e-5) and torch.allclose(w2.grad, norm.weight.grad, atol=1e-5)
    forgotten = (dy * (1 + w2.detach())) / torch.sqrt(x.detach().pow(2).mean(-1, keepdim=True) + 1e-6)
    assert (forgotten - x.grad).abs().max() > 1e-2                  # without the term through the mean


def test_swiglu_backward_passes_gradcheck_and_equals_autograd():
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(*s, dtype=torch.float64, generator=g).requires_grad_(True)
            for s in [(2, 3, 6), (10, 6), (10, 6), (6, 10)]]
    assert torch.autograd.gradcheck(swiglu, args, eps=1e-6, atol=1e-6)
    mlp = MLP(6, 10).double()
    with torch.no_grad():
        for p, a in zip([mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight], args[1:]):
            p.copy_(a)
    x = args[0].detach().clone().requires_grad_(True)
    dy = torch.randn(2, 3, 6, dtype=torch.float64, generator=g)
    (mlp(x) * dy).sum().backward()
    (swiglu(*args) * dy).sum().backward()
    assert torch.allclose(args[0].grad, x.grad, atol=1e-10)
    assert torch.allclose(args[1].grad, mlp.gate_proj.weight.grad, atol=1e-10)
    assert torch.allclose(args[3].grad, mlp.down_proj.weight.grad, atol=1e-10)
    assert (args[1].grad - args[2].grad).abs().max() > 1e-3          # gate and up are not mixed up


def _train(model, opt, steps, seed=0):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(4, 8, generator=g)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def _small():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 3))


@pytest.mark.parametrize("groups", [False, True])
def test_adamw_equals_torch_step_for_step(groups):
    a, b = _small(), _small()
    params = lambda m: decay_groups(m, 0.1) if groups else m.parameters()
    mine = AdamW(params(a), lr=1e-2, weight_decay=0.1)
    theirs = torch.optim.AdamW(params(b), lr=1e-2, weight_decay=0.1, foreach=False)
    for step in range(6):
        pa, pb = _train(a, mine, 1, seed=step), _train(b, theirs, 1, seed=step)
        for x, y in zip(pa, pb):
            assert torch.allclose(x, y, rtol=1e-6, atol=1e-7), step
    if groups:                                                       # vectors are left undecayed
        assert [len(g["params"]) for g in mine.param_groups] == [2, 4]
    c = _small()
    adam_l2 = torch.optim.Adam(c.parameters(), lr=1e-2, weight_decay=0.1)   # decay added to the gradient
    for step in range(6):
        pc = _train(c, adam_l2, 1, seed=step)
    assert max((x - y).abs().max().item() for x, y in zip(pa, pc)) > 1e-5


def test_clip_equals_torch():
    for max_norm in (0.5, 1e3):                                      # clipped, and left alone
        a, b = _small(), _small()
        for m in (a, b):
            m(torch.ones(2, 8)).sum().backward()
        mine = clip_grad_norm(list(a.parameters()), max_norm)
        theirs = torch.nn.utils.clip_grad_norm_(b.parameters(), max_norm)
        assert torch.allclose(mine, theirs)
        for p, q in zip(a.parameters(), b.parameters()):
            assert torch.allclose(p.grad, q.grad, atol=1e-7)
    assert mine.item() < 1e3 and abs(sum(p.grad.pow(2).sum() for p in a.parameters()).sqrt() - mine) < 1e-4


def test_schedule_warms_up_then_follows_the_cosine_to_the_floor():
    peak, warmup, total, floor = 1e-3, 10, 110, 1e-4
    lrs = [lr_at(s, peak, warmup, total, floor) for s in range(130)]
    assert [round(x / peak, 6) for x in lrs[:10]] == [round((s + 1) / 10, 6) for s in range(10)]
    assert lrs[10] == pytest.approx(peak)
    assert lrs[60] == pytest.approx(floor + (peak - floor) / 2)      # halfway down the cosine
    assert all(x >= y for x, y in zip(lrs[10:], lrs[11:]))
    assert lrs[110] == pytest.approx(floor) and lrs[129] == pytest.approx(floor)
    assert lrs[35] == pytest.approx(floor + (peak - floor) * 0.5 * (1 + math.cos(math.pi / 4)))
