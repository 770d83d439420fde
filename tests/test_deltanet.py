"""qwen/deltanet.py against transformers' Qwen3.5 Gated DeltaNet, on checkpoints transformers wrote.

Fidelity is measured as max |ours - theirs| / max |theirs| (the error relative to the output's
scale), in fp32, and must stay <= 1e-5.
"""
import math
import types

import pytest
import torch

from qwen.cache import LayerCache
from qwen.deltanet import GatedDeltaNet, delta_rule_chunked, delta_rule_recurrent
from qwen.lang import QwenError
from qwen.norm import l2norm
from qwen.config import Config
from qwen.weights import load, load_weights

TOL = 1e-5
PREFIX = "layers.0.linear_attn."


def rel(a, b):
    """max |a - b| relative to the scale of b."""
    return ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()


def rule_inputs(B, H, T, dk, dv, seed=0):
    """Inputs as the layer makes them: unit q and k (q scaled), log decays <= 0, beta in (0, 1)."""
    gen = torch.Generator().manual_seed(seed)
    q = l2norm(torch.randn(B, H, T, dk, generator=gen)) * dk ** -0.5
    k = l2norm(torch.randn(B, H, T, dk, generator=gen))
    v = torch.randn(B, H, T, dv, generator=gen)
    g = -torch.rand(B, H, T, generator=gen) * torch.linspace(0.01, 2, H)[:, None]   # slow to fast heads
    beta = torch.rand(B, H, T, generator=gen)
    state = torch.randn(B, H, dk, dv, generator=gen)
    return q, k, v, g, beta, state


@pytest.fixture(scope="module")
def hf():
    return pytest.importorskip("transformers.models.qwen3_5.modeling_qwen3_5")


# (key heads, value heads, dk, dv): equal heads, and more value heads than key heads
SIZES = {"equal": (2, 2, 8, 8), "grouped": (2, 6, 8, 16)}


@pytest.fixture(scope="module", params=list(SIZES))
def written(request, tmp_path_factory, hf):
    """A one-layer text model built and saved by transformers (fp32), with every parameter drawn
    at random (seeded) so that no weight sits at its initial value. Returns (folder, their layer)."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    nk, nv, dk, dv = SIZES[request.param]
    config = Qwen3_5TextConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
        layer_types=["linear_attention"], num_attention_heads=2, num_key_value_heads=1, head_dim=16,
        linear_num_key_heads=nk, linear_num_value_heads=nv, linear_key_head_dim=dk,
        linear_value_head_dim=dv, linear_conv_kernel_dim=4, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = Qwen3_5ForCausalLM(config).float().eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = {"A_log": 1.0, "dt_bias": 1.0, "conv1d.weight": 0.5, "norm.weight": 0.3}.get(
                name.split("linear_attn.")[-1], 0.3)
            p.copy_(torch.randn(p.shape, generator=gen) * scale + (1.0 if name.endswith("norm.weight") else 0.0))
    folder = tmp_path_factory.mktemp(f"hf-{request.param}")
    model.save_pretrained(folder)
    return folder, model.model.layers[0].linear_attn


def ours(folder):
    return load(GatedDeltaNet(Config.load(folder)), load_weights(folder), PREFIX)


def hidden(B, T, H=32, seed=2):
    return torch.randn(B, T, H, generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- the layer, against transformers

@pytest.mark.parametrize("T", [1, 7, 64, 150])
def test_layer_matches_transformers(written, T):
    folder, theirs = written
    x = hidden(2, T)
    with torch.no_grad():
        assert rel(ours(folder)(x), theirs(x)) <= TOL


def test_loading_is_strict_and_keeps_the_stored_tensors(written):
    folder, theirs = written
    W = load_weights(folder)
    layer = ours(folder)
    assert sorted(k for k, _ in layer.named_parameters()) == sorted(k[len(PREFIX):] for k in W.names_under(PREFIX))
    assert torch.equal(layer.A_log.detach(), theirs.A_log.detach())
    assert torch.equal(layer.conv1d.weight.detach(), theirs.conv1d.weight.detach())
    with pytest.raises(QwenError, match=r"layers\.0\.linear_attn\.conv1d\.weight"):
        cfg = Config.load(folder)
        load(GatedDeltaNet(types.SimpleNamespace(**{**cfg.__dict__, "linear_conv_kernel_dim": 3})), W, PREFIX)


def test_steps_match_transformers(written):
    """The conv, beta and the decay, each against the reference's own lines."""
    folder, theirs = written
    layer, x = ours(folder), hidden(1, 9)
    with torch.no_grad():
        mixed = theirs.in_proj_qkv(x).transpose(1, 2)
        ref = torch.nn.functional.silu(theirs.conv1d(mixed)[..., :9]).transpose(1, 2)
        assert rel(layer.causal_conv(layer.in_proj_qkv(x)), ref) <= TOL
        beta, g = layer.beta_and_decay(x)
        ref_g = -theirs.A_log.float().exp() * torch.nn.functional.softplus(theirs.in_proj_a(x) + theirs.dt_bias)
        assert rel(beta, theirs.in_proj_b(x).sigmoid().transpose(1, 2)) <= TOL
        assert rel(g, ref_g.transpose(1, 2)) <= TOL and (g < 0).all()


def test_cache_prefill_then_single_tokens_equals_the_full_sequence(written):
    folder, theirs = written
    layer, x = ours(folder), hidden(2, 75)
    cache = LayerCache()
    with torch.no_grad():
        full = layer(x)
        parts = [layer(x[:, :70], cache)]                        # chunked, stores window and state
        assert cache.conv.shape == (2, layer.conv_dim, 3) and cache.state.dtype == torch.float32
        assert cache.state.shape == (2, layer.nv, layer.dk, layer.dv)
        for t in range(70, 75):
            parts.append(layer(x[:, t:t + 1], cache))           # one recurrent step each
        assert rel(torch.cat(parts, 1), full) <= TOL
        assert rel(full, theirs(x)) <= TOL
        cache2 = LayerCache()    # two prompts in a row: chunked from a state
        two = torch.cat([layer(x[:, :2], cache2), layer(x[:, 2:], cache2)], 1)
        assert rel(two, full) <= TOL and rel(cache2.state, cache.state) <= TOL


def test_a_cache_from_another_batch_is_one_clear_line(written):
    """A cache filled with 2 sequences, then used for 1: one QwenError naming the conv window's
    shape and model.new_cache(), not torch.cat's 'Sizes of tensors must match'; nothing changed."""
    folder, _ = written
    layer, x = ours(folder), hidden(2, 10)
    cache = LayerCache()
    with torch.no_grad():
        layer(x, cache)
        conv, state = cache.conv.clone(), cache.state.clone()
        for other in (x[:1, :1], x[:1]):                          # decode step and prompt alike
            with pytest.raises(QwenError, match=r"conv window of shape \[2, .*new_cache"):
                layer(other, cache)
    assert torch.equal(cache.conv, conv) and torch.equal(cache.state, state)


def test_the_chunked_form_without_float64_as_on_apple_gpus(monkeypatch):
    """MPS has no float64 (pytorch#122602): there the log decays stay fp32. That path, run here on
    the CPU, still equals the recurrent form to 1e-5 on the layer's usual decays (-0.01 to -3)."""
    from qwen import deltanet
    assert deltanet.decay_dtype(torch.device("mps")) == torch.float32
    assert deltanet.decay_dtype(torch.device("cpu")) == torch.float64
    q, k, v, g, beta, state = rule_inputs(1, 4, 200, 16, 8, seed=3)
    g = -torch.rand(g.shape, generator=torch.Generator().manual_seed(3)) * 3 - 0.01
    ref, s_ref = delta_rule_recurrent(q, k, v, g, beta, state)
    monkeypatch.setattr(deltanet, "decay_dtype", lambda device: torch.float32)
    out, s = delta_rule_chunked(q, k, v, g, beta, state)
    assert rel(out, ref) <= 1e-5 and rel(s, s_ref) <= 1e-5


def test_a_state_that_is_not_a_tensor_is_one_clear_line():
    q, k, v, g, beta, _ = rule_inputs(1, 2, 5, 8, 4)
    for rule in (delta_rule_recurrent, delta_rule_chunked):
        with pytest.raises(QwenError, match=r"the state is a list, not a tensor.*\(1, 2, 8, 4\)"):
            rule(q, k, v, g, beta, [[0.0]])


def test_uneven_head_groups_are_a_clear_error():
    bad = types.SimpleNamespace(hidden_size=16, linear_num_key_heads=4, linear_num_value_heads=6,
                                linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=4,
                                rms_norm_eps=1e-6)
    with pytest.raises(QwenError, match=r"6 value heads cannot be shared evenly by 4 key heads"):
        GatedDeltaNet(bad)


def test_tiny_checkpoint_in_bf16(tiny_path):
    """The built-in checkpoint's layers load strictly (bf16, fp32 A_log and norm) and compute in
    bf16 close to the same layer upcast to fp32."""
    cfg, W = Config.load(tiny_path), load_weights(tiny_path)
    for i in cfg.linear_attention_layers:
        layer = load(GatedDeltaNet(cfg), W, f"layers.{i}.linear_attn.")
        x = hidden(1, 20, cfg.hidden_size, seed=i)
        with torch.no_grad():
            y = layer(x.bfloat16())
            y32 = layer.float()(x)
        assert y.dtype == torch.bfloat16 and y.shape == x.shape
        assert rel(y, y32) < 3e-2


# ---------------------------------------------------------------- the two rules

@pytest.mark.parametrize("T", [1, 5, 64, 100, 128, 150])
@pytest.mark.parametrize("with_state", [False, True])
def test_rules_match_transformers(hf, T, with_state):
    q, k, v, g, beta, state = rule_inputs(2, 3, T, 16, 8)
    state = state if with_state else None
    t = lambda x: x.transpose(1, 2)                              # theirs: (batch, seq, heads, ...)
    scaled_back = q * 16 ** 0.5                                  # they scale q themselves
    ref_out, ref_state = hf.torch_recurrent_gated_delta_rule(
        t(scaled_back), t(k), t(v), t(g), t(beta), initial_state=state, output_final_state=True)
    chk_out, chk_state = hf.torch_chunk_gated_delta_rule(
        t(scaled_back), t(k), t(v), t(g), t(beta), initial_state=state, output_final_state=True)
    for rule, (ref_o, ref_s) in [(delta_rule_recurrent, (ref_out, ref_state)),
                                 (delta_rule_chunked, (chk_out, chk_state))]:
        out, final = rule(q, k, v, g, beta, state)
        assert out.shape == (2, 3, T, 8) and final.shape == (2, 3, 16, 8)
        assert rel(out, t(ref_o)) <= TOL and rel(final, ref_s) <= TOL


@pytest.mark.parametrize("T, chunk", [(64, 64), (200, 64), (33, 64), (100, 16), (7, 4)])
@pytest.mark.parametrize("with_state", [False, True])
def test_recurrent_equals_chunked(T, chunk, with_state):
    q, k, v, g, beta, state = rule_inputs(1, 4, T, 32, 16, seed=T)
    state = state if with_state else None
    out_r, s_r = delta_rule_recurrent(q, k, v, g, beta, state)
    out_c, s_c = delta_rule_chunked(q, k, v, g, beta, state, chunk=chunk)
    assert rel(out_c, out_r) <= TOL and rel(s_c, s_r) <= TOL


def test_chunked_survives_heads_that_forget_at_once():
    """Log decays of -30 per token: exp(c_t - c_j) above the diagonal overflows to inf before the
    mask removes it, and exp(c) underflows to 0; neither may leak a nan or inf."""
    q, k, v, g, beta, state = rule_inputs(1, 2, 100, 16, 8, seed=7)
    g = torch.full_like(g, -30.0)
    out_r, s_r = delta_rule_recurrent(q, k, v, g, beta, state)
    out_c, s_c = delta_rule_chunked(q, k, v, g, beta, state)
    assert torch.isfinite(out_c).all() and torch.isfinite(s_c).all()
    assert rel(out_c, out_r) <= TOL and rel(s_c, s_r) <= TOL


def test_splitting_a_sequence_and_passing_the_state_changes_nothing():
    q, k, v, g, beta, _ = rule_inputs(1, 2, 90, 16, 16, seed=3)
    full, s_full = delta_rule_chunked(q, k, v, g, beta)
    first, s = delta_rule_chunked(q[:, :, :50], k[:, :, :50], v[:, :, :50], g[:, :, :50], beta[:, :, :50])
    rest, s = delta_rule_recurrent(q[:, :, 50:], k[:, :, 50:], v[:, :, 50:], g[:, :, 50:], beta[:, :, 50:], s)
    assert rel(torch.cat([first, rest], 2), full) <= TOL and rel(s, s_full) <= TOL


def test_the_rule_is_online_regression():
    """Writing (k, v) with beta = 1 and no decay makes reading k return v, whatever S held;
    beta = 0.5 moves the read value half way; a decay of g shrinks the old content by exp(g)."""
    gen = torch.Generator().manual_seed(5)
    k = l2norm(torch.randn(1, 1, 1, 8, generator=gen))
    v = torch.randn(1, 1, 1, 4, generator=gen)
    S0 = torch.randn(1, 1, 8, 4, generator=gen)
    before = (k[0, 0] @ S0[0, 0])[0]
    for b, expected in [(1.0, v[0, 0, 0]), (0.5, before + 0.5 * (v[0, 0, 0] - before))]:
        read, _ = delta_rule_recurrent(k, k, v, torch.zeros(1, 1, 1), torch.full((1, 1, 1), b), S0)
        torch.testing.assert_close(read[0, 0, 0], expected, rtol=1e-5, atol=1e-5)
    _, S = delta_rule_recurrent(k, k, v, torch.full((1, 1, 1), -0.7), torch.zeros(1, 1, 1), S0)
    torch.testing.assert_close(S, S0 * torch.tensor(-0.7).exp())


def test_inputs_are_not_modified():
    q, k, v, g, beta, state = rule_inputs(1, 2, 70, 8, 8)
    before = [t.clone() for t in (q, k, v, g, beta, state)]
    delta_rule_recurrent(q, k, v, g, beta, state), delta_rule_chunked(q, k, v, g, beta, state)
    assert all(torch.equal(a, b) for a, b in zip(before, (q, k, v, g, beta, state)))


def test_ch07_finds_the_wy_ut_form_where_it_points():
    """ch07 sends the learner to delta_rule_chunked's docstring for "the WY / UT form": it must be named there."""
    from pathlib import Path
    from qwen.deltanet import delta_rule_chunked
    ch07 = (Path(__file__).resolve().parent.parent / "ch07_deltanet.py").read_text(encoding="utf-8")
    assert "WY / UT form, derived in `delta_rule_chunked`'s docstring" in ch07.replace("\n# ", " ")
    assert "WY / UT form" in delta_rule_chunked.__doc__ and "(I + A)" in delta_rule_chunked.__doc__


def gradients_of_both_forms(inputs):
    """The gradients of one loss (output and final state) for every input: recurrent, then chunked."""
    grads = []
    for rule in (delta_rule_recurrent, delta_rule_chunked):
        leaves = [t.clone().requires_grad_() for t in inputs]
        out, final = rule(*leaves)
        (out * torch.linspace(-1, 1, out.shape[-1])).sum().add(final.square().sum()).backward()
        grads.append([t.grad for t in leaves])
    return grads


def test_gradients_through_chunked_equal_the_recurrent_ones():
    """Autograd flows through the chunked form (its in-place products must not touch a tensor
    backward needs) and gives the recurrent form's gradients, for every input and the state."""
    grads = gradients_of_both_forms(rule_inputs(2, 3, 70, 8, 8, seed=4))
    for got, ref in zip(grads[1], grads[0]):
        assert rel(got, ref) <= 1e-4


@pytest.mark.parametrize("shared", [False, True])
def test_generating_the_recurrent_form_corrects_only_its_own_new_states(shared):
    """Without autograd (generating) each token's correction goes into the new S in place: the same
    numbers as the recorded form, the caller's state untouched (one for the whole batch too). With
    `states` (a trail's memory, qwen/mtp.py), token t's state is written into states[t] and stays what
    the recorded form has after t + 1 tokens: the tokens after it write other slots."""
    q, k, v, g, beta, state = rule_inputs(2, 3, 9, 8, 4, seed=11)
    state = state[:1] if shared else state                           # (1, heads, dk, dv): broadcast
    before = state.clone()
    with torch.no_grad():
        plain_out, plain_final = delta_rule_recurrent(q, k, v, g, beta, state)
        slots = torch.full((9, 2, 3, 8, 4), float("nan"))            # (tokens, batch, heads, dk, dv)
        out, final = delta_rule_recurrent(q, k, v, g, beta, state, states=slots)
    graded = torch.full((9, 2, 3, 8, 4), float("nan"))               # with autograd on (no input wants a
    delta_rule_recurrent(q, k, v, g, beta, state, states=graded)     # gradient): the slots are filled alike
    assert torch.equal(graded, slots)
    ref_out, ref_final = delta_rule_recurrent(q, k, v, g, beta, state)   # recorded: written out, as taught
    assert torch.equal(state, before)
    assert final.data_ptr() == slots[-1].data_ptr()                  # the last slot is the final state
    assert rel(out, ref_out) <= 1e-6 and rel(final, ref_final) <= 1e-6 and rel(plain_final, ref_final) <= 1e-6
    assert torch.equal(plain_out, out)
    for t in range(9):                                               # each slot: the state after t + 1 tokens
        after = delta_rule_recurrent(q[:, :, :t + 1], k[:, :, :t + 1], v[:, :, :t + 1], g[:, :, :t + 1],
                                     beta[:, :, :t + 1], state)[1]
        assert rel(slots[t], after) <= 1e-6, t


@pytest.mark.parametrize("with_state", [False, True])
def test_no_tokens_change_nothing(with_state):
    """T = 0 (both forms): no output and the state handed back unchanged (zeros without one)."""
    q, k, v, g, beta, state = rule_inputs(2, 3, 0, 8, 4)
    state = state if with_state else None
    for rule in (delta_rule_recurrent, delta_rule_chunked):
        out, final = rule(q, k, v, g, beta, state)
        assert out.shape == (2, 3, 0, 4) and final.shape == (2, 3, 8, 4)
        assert torch.equal(final, torch.zeros(2, 3, 8, 4) if state is None else state)


def test_a_state_of_the_wrong_shape_is_one_clear_line_and_a_shared_one_broadcasts():
    """Both forms: a state that is not (batch, heads, dk, dv) (here dk and dv swapped, or batch and
    heads) is a QwenError naming the shape wanted, not a silent reshape; one state for the whole
    batch (1, heads, dk, dv) is used for every sequence, the same in both."""
    q, k, v, g, beta, state = rule_inputs(2, 3, 70, 8, 4)
    for bad in (state.transpose(-1, -2).contiguous(), state.transpose(0, 1).contiguous()):
        for rule in (delta_rule_recurrent, delta_rule_chunked):
            with pytest.raises(QwenError, match=r"\(batch, heads, dk, dv\) = \(2, 3, 8, 4\)"):
                rule(q, k, v, g, beta, bad)
    shared = state[:1]
    out_r, s_r = delta_rule_recurrent(q, k, v, g, beta, shared)
    out_c, s_c = delta_rule_chunked(q, k, v, g, beta, shared)
    ref, _ = delta_rule_recurrent(q, k, v, g, beta, shared.expand(2, -1, -1, -1).contiguous())
    assert rel(out_c, out_r) <= TOL and rel(s_c, s_r) <= TOL and torch.equal(out_r, ref)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_bad_states_are_one_clear_line(lang):
    """`states` of the wrong layout (q's (batch, heads, seq, ...) instead of (seq, batch, heads, ...)),
    dtype or kind, or inputs that want a gradient: one QwenError naming what to give, never a silent
    resize that leaves the slots unfilled or torch's own out= error."""
    from qwen.lang import set_lang
    q, k, v, g, beta, state = rule_inputs(2, 3, 5, 8, 4)
    wanted = r"\(5, 2, 3, 8, 4\)"
    set_lang(lang)
    try:
        with torch.no_grad():
            for bad in (torch.zeros(2, 3, 5, 8, 4), torch.zeros(5, 2, 3, 8, 4, dtype=torch.float64), []):
                with pytest.raises(QwenError, match=wanted):
                    delta_rule_recurrent(q, k, v, g, beta, state, states=bad)
        with pytest.raises(QwenError, match="no_grad"):
            delta_rule_recurrent(q, k.requires_grad_(), v, g, beta, state, states=torch.zeros(5, 2, 3, 8, 4))
    finally:
        set_lang("en")


@pytest.mark.parametrize("strong", [-1e3, -1e6, -math.inf])
def test_chunked_after_one_token_that_forgets_everything(strong):
    """One token with a huge log decay (or -inf: forget all) among slow ones: the chunk's cumulative
    decays c then sit near `strong`, where fp32 cannot resolve the small steps after it (-1e6: 3%
    off), and -inf - -inf is nan. The recurrent form handles both exactly."""
    q, k, v, g, beta, state = rule_inputs(1, 2, 128, 16, 8, seed=1)
    g = torch.full_like(g, -0.01)
    g[:, :, 10] = g[:, :, 70] = strong
    out_r, s_r = delta_rule_recurrent(q, k, v, g, beta, state)
    out_c, s_c = delta_rule_chunked(q, k, v, g, beta, state)
    assert torch.isfinite(out_c).all() and torch.isfinite(s_c).all()
    assert rel(out_c, out_r) <= TOL and rel(s_c, s_r) <= TOL


@pytest.mark.parametrize("seed", [0, 1])
def test_chunked_is_as_exact_as_recurrent_when_some_tokens_forget_strongly(seed):
    """Mostly slow decays with a few strong ones (down to -50, as a large `a` gives): the chunk's
    cumulative log decays reach -100 and more; c_t - c_j taken in fp32 is off by up to |c| * 6e-8
    (chunked vs recurrent 1.9e-5 on the state). Both forms agree to a few fp32 roundings."""
    q, k, v, g, beta, state = rule_inputs(1, 4, 256, 16, 16, seed=seed)
    g = -(torch.rand(g.shape, generator=torch.Generator().manual_seed(seed)) ** 8) * 50
    out_r, s_r = delta_rule_recurrent(q, k, v, g, beta, state)
    out_c, s_c = delta_rule_chunked(q, k, v, g, beta, state)
    assert rel(out_c, out_r) <= 1e-6 and rel(s_c, s_r) <= 1e-6


@pytest.mark.parametrize("shape", [(), (4,), (1,), (1, 1, 1, 1), (2, 3, 1, 4), (3, 8, 1), (1, 4), (8, 1)])
def test_a_state_that_broadcasts_inside_a_head_is_one_clear_line(shape):
    """Broadcasting is for batch and heads only: a state without a whole (dk, dv) matrix per head
    (a scalar, (1, 1, 1, 1), (dv,)...) is refused by both forms with one QwenError, in English and in
    Chinese, not torch's own message from inside the recurrent form's matmul (chunked: a traceback, or a
    silently broadcast matrix)."""
    from qwen.lang import set_lang
    q, k, v, g, beta, _ = rule_inputs(2, 3, 5, 8, 4)
    for rule in (delta_rule_recurrent, delta_rule_chunked):
        with pytest.raises(QwenError, match=r"\(batch, heads, dk, dv\) = \(2, 3, 8, 4\)") as err:
            rule(q, k, v, g, beta, torch.zeros(shape))
        try:
            set_lang("zh")
            assert "\n" not in str(err.value) and "应为 (batch, heads, dk, dv) = (2, 3, 8, 4)" in str(err.value)
        finally:
            set_lang("en")


@pytest.mark.parametrize("shape", [(8, 4), (1, 8, 4), (3, 8, 4), (1, 1, 8, 4), (2, 1, 8, 4), (1, 3, 8, 4)])
def test_every_state_that_broadcasts_over_batch_and_heads_is_used_for_each(shape):
    """Every shape that broadcasts to (batch, heads, dk, dv) over batch and heads: both forms give
    what the same state copied out to (batch, heads, dk, dv) gives."""
    q, k, v, g, beta, _ = rule_inputs(2, 3, 70, 8, 4)
    state = torch.randn(shape, generator=torch.Generator().manual_seed(6))
    full = state.expand(2, 3, 8, 4).contiguous()
    ref_out, ref_state = delta_rule_recurrent(q, k, v, g, beta, full)
    for rule in (delta_rule_recurrent, delta_rule_chunked):
        out, final = rule(q, k, v, g, beta, state)
        assert final.shape == (2, 3, 8, 4)
        assert rel(out, ref_out) <= TOL and rel(final, ref_state) <= TOL


@pytest.mark.parametrize("shape", [(2, 3, 8, 4), (3, 8, 4), (1, 3, 8, 4)])
def test_no_tokens_hand_back_a_full_state_of_ones_own(shape):
    """T = 0 with a state: both forms give a new (batch, heads, dk, dv) tensor equal to the state, never
    the caller's own tensor in its own shape ((3, 8, 4) for a state shared by the batch), so the two
    forms stay interchangeable."""
    q, k, v, g, beta, _ = rule_inputs(2, 3, 0, 8, 4)
    state = torch.randn(shape, generator=torch.Generator().manual_seed(8))
    for rule in (delta_rule_recurrent, delta_rule_chunked):
        _, final = rule(q, k, v, g, beta, state)
        assert final.shape == (2, 3, 8, 4) and torch.equal(final, state.expand(2, 3, 8, 4))
        final.add_(1.0)                                        # the caller may change what it got back
        assert not torch.equal(final, state.expand(2, 3, 8, 4))


def test_the_layer_reads_no_tokens_and_changes_nothing(written):
    """x of length 0, with and without a cache: the rules take T = 0, and so does the conv (not torch's
    "Kernel size can't be greater than actual input size", also from the whole model given no ids):
    an empty output, the cache unchanged, and the sequence continues as if nothing was read."""
    folder, _ = written
    layer, x = ours(folder), hidden(2, 9)
    cache = LayerCache()
    with torch.no_grad():
        assert layer(x[:, :0]).shape == (2, 0, 32)
        first = layer(x[:, :5], cache)
        conv, state = cache.conv.clone(), cache.state.clone()
        assert layer(x[:, 5:5], cache).shape == (2, 0, 32)
        assert torch.equal(cache.conv, conv) and torch.equal(cache.state, state)
        rest = layer(x[:, 5:], cache)
        assert rel(torch.cat([first, rest], 1), layer(x)) <= TOL


@pytest.mark.parametrize("chunk", [0, -1, 64.0, None])
def test_a_chunk_that_is_not_a_positive_whole_number_is_one_clear_line(chunk):
    """chunk = 0, -1 or 64.0 is one QwenError naming the argument, in both languages, not a
    ZeroDivisionError, "invalid shape dimension -129" or a TypeError from F.pad."""
    from qwen.lang import set_lang
    q, k, v, g, beta, state = rule_inputs(1, 2, 129, 8, 4)
    with pytest.raises(QwenError, match=r"chunk = .*1 or more") as err:
        delta_rule_chunked(q, k, v, g, beta, state, chunk=chunk)
    try:
        set_lang("zh")
        assert "不小于 1 的整数" in str(err.value) and "\n" not in str(err.value)
    finally:
        set_lang("en")


@pytest.mark.parametrize("decays", ["-2 per token", "a few strong"])
def test_gradients_stay_finite_when_heads_forget_fast(decays):
    """exp(c_t - c_j) above the diagonal (j > t, masked away) overflows to inf once a chunk's decays
    sum past -88 (-2 per token is enough); a mask applied after exp would make backward compute 0 * inf,
    and g's gradient nan everywhere. The chunked form's gradients must equal the recurrent ones."""
    inputs = list(rule_inputs(1, 2, 100, 8, 4, seed=7))
    gen = torch.Generator().manual_seed(0)
    inputs[3] = (torch.full_like(inputs[3], -2.0) if decays == "-2 per token"
                 else -(torch.rand(inputs[3].shape, generator=gen) ** 8) * 50)
    grads = gradients_of_both_forms(inputs)
    for got, ref in zip(grads[1], grads[0]):
        assert torch.isfinite(got).all() and rel(got, ref) <= 1e-5


def float64_recurrent(q, k, v, g, beta):
    """The rule token by token in float64: the reference both forms are measured against."""
    q, k, v, g, beta = (t.double() for t in (q, k, v, g, beta))
    S = q.new_zeros(*k.shape[:2], k.shape[-1], v.shape[-1])
    out = []
    for t in range(k.shape[2]):
        S = S * g[:, :, t, None, None].exp()
        error = beta[:, :, t, None] * (v[:, :, t] - (k[:, :, t, None] @ S).squeeze(-2))
        S = S + k[:, :, t, :, None] * error[:, :, None]
        out.append((q[:, :, t, None] @ S).squeeze(-2))
    return torch.stack(out, 2), S


@pytest.mark.parametrize("decays", ["float64", "float32"])
def test_chunked_is_as_exact_as_float64_after_strong_decays_in_either_dtype(monkeypatch, decays):
    """Log decays down to -200 per token and beta from 0 to 1, as a model initialised with std 0.15
    makes them: the chunk's running log decay reaches -10000, and exp(c_t - c_j) taken as the difference
    of two fp32 running sums is off by |c| * 6e-8 (2e-5 to 5e-5 relative on the outputs from the first
    64-token chunk on, as transformers' chunked form is). Summing the decays between t and j keeps fp32
    (Apple's GPUs) as exact as float64: both within a few fp32 roundings of the float64 recurrence."""
    from qwen import deltanet
    monkeypatch.setattr(deltanet, "decay_dtype", lambda device: getattr(torch, decays))
    gen = torch.Generator().manual_seed(4)
    q, k, v, _, _, _ = rule_inputs(1, 4, 128, 32, 16, seed=4)
    v = v * 10
    g = -torch.rand(1, 4, 128, generator=gen) ** 2 * 200                  # many near -200, some near 0
    beta = torch.sigmoid(torch.randn(1, 4, 128, generator=gen) * 8)        # most near 0 or 1
    for T in (10, 64, 128):
        args = [t[:, :, :T] for t in (q, k, v, g, beta)]
        ref_out, ref_state = float64_recurrent(*args)
        out, state = delta_rule_chunked(*args)
        assert rel(out, ref_out) <= 2e-6 and rel(state, ref_state) <= 2e-6, (T, rel(out, ref_out), rel(state, ref_state))
