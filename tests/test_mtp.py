"""The MTP head (qwen/mtp.py) and speculative greedy decoding.

The head against a reference built here from transformers' own Qwen3_5DecoderLayer and
Qwen3_5RMSNorm (transformers has no MTP module: its Qwen3.5 classes drop `^mtp.*` at load);
speculative decoding against plain greedy decoding, token for token, with every path forced
(drafts all accepted, all rejected, a mix), and the caches it leaves against a plain run's.
"""
import json
from pathlib import Path

import pytest
import torch

from helpers import write_transformers_checkpoint
from qwen.generate import generate_ids
from qwen.lang import QwenError
from qwen.model import load_model
from engine.shapes import mtp_shapes
from engine.speculative import coverage, frequent_tokens, replaying
from qwen.config import Config
from qwen.mtp import accepted, head_read, load_head, speculative_ids
from qwen.weights import load_weights

MANIFEST = Path("/work/shared/qwen35/manifest.json")
BENCH_MANIFEST = Path(__file__).resolve().parents[1] / "bench" / "qwen3.5-0.8b-manifest.json"
PROMPT = [9707, 11, 1879, 0, 374, 264, 1273]     # tiny: real-sized vocabulary
HF_PROMPT = [5, 11, 100, 7]                     # the transformers checkpoint: 512 ids
N = 64


@pytest.fixture(scope="module")
def tiny(tiny_path):
    model = load_model(tiny_path)
    load_head(model)
    return model


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    """A checkpoint transformers wrote (vocabulary 512), the MTP head added (save_pretrained drops it)."""
    from safetensors.torch import load_file, save_file
    folder = write_transformers_checkpoint(tmp_path_factory.mktemp("hf-mtp") / "ckpt", layout="text")
    g = torch.Generator().manual_seed(1)
    extra = {name: torch.randn(shape, generator=g) * (0.3 if "norm" in name else 0.25)
             for name, (shape, _) in mtp_shapes(Config.load(folder)).items()}
    file = folder / "model.safetensors"
    save_file({**load_file(file), **extra}, file, metadata={"format": "pt"})
    return folder


@pytest.fixture(scope="module")
def hf_model(hf_folder):
    model = load_model(hf_folder)
    load_head(model)
    return model


def test_mtp_shapes_match_the_real_inventory():
    manifest = json.loads((MANIFEST if MANIFEST.is_file() else BENCH_MANIFEST).read_text(encoding="utf-8"))
    real = {n: (tuple(t["shape"]), t["dtype"]) for n, t in manifest["tensors"].items() if n.startswith("mtp.")}
    assert len(real) == 15
    assert mtp_shapes(Config.from_dict(manifest["config"], source="manifest")) == real


def test_the_tiny_checkpoint_has_the_whole_head_in_the_real_format(tiny_path, tiny):
    cfg = Config.load(tiny_path)
    W = load_weights(tiny_path)
    stored = {n: (W.shape(n), W.info(n).dtype) for n in W.names_under("mtp.")}
    assert stored == mtp_shapes(cfg) and len(stored) == 15
    assert tiny.mtp is not None and sorted(k for k in tiny.state_dict() if k.startswith("mtp.")) == sorted(stored)


def test_head_equals_a_reference_from_transformers_layers(tiny_path, tiny):
    """fc(cat[norm_e(embed), norm_h(hidden)]), embedding first, one full-attention layer, mtp.norm,
    built from transformers' Qwen3_5DecoderLayer / Qwen3_5RMSNorm with the checkpoint's mtp.* weights."""
    hf = pytest.importorskip("transformers.models.qwen3_5.modeling_qwen3_5")
    from hf_layers import causal_mask, hf_positions
    from engine.tiny import TINY_TEXT_CONFIG
    config = hf.Qwen3_5TextConfig(**{k: v for k, v in TINY_TEXT_CONFIG.items() if k != "model_type"})
    config._attn_implementation = "eager"
    W = load_weights(tiny_path)
    w = {n[len("mtp."):]: W[n].float() for n in W.names_under("mtp.")}
    H, eps = config.hidden_size, config.rms_norm_eps
    norms = {}
    for name in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        norms[name] = hf.Qwen3_5RMSNorm(H, eps=eps)
        norms[name].weight.data.copy_(w[name + ".weight"])
    layer = hf.Qwen3_5DecoderLayer(config, layer_idx=config.layer_types.index("full_attention")).eval()
    layer.load_state_dict({n[len("layers.0."):]: t for n, t in w.items() if n.startswith("layers.0.")}, strict=True)

    T = 6
    ids = torch.tensor([PROMPT[:T]])
    hidden = torch.randn(1, T, H, generator=torch.Generator().manual_seed(0)) * 3
    with torch.no_grad():
        e = norms["pre_fc_norm_embedding"](tiny.embed_tokens(ids).float())
        x = torch.nn.functional.linear(torch.cat([e, norms["pre_fc_norm_hidden"](hidden)], -1), w["fc.weight"])
        rope = hf.Qwen3_5TextRotaryEmbedding(config)(x, hf_positions(torch.arange(T)[None]))
        out = layer(x, position_embeddings=rope, attention_mask=causal_mask(T))
        ref = norms["norm"](out[0] if isinstance(out, tuple) else out)
        ours = head_read(tiny, ids[0].tolist(), hidden, None, 0)
    assert ours.dtype == torch.float32 and ours.shape == (1, T, H)
    assert torch.allclose(ours, ref, atol=1e-5, rtol=1e-5), (ours - ref).abs().max()


def test_speculative_equals_plain_greedy_on_the_tiny_checkpoint(tiny):
    """k = 1 and 4 here (the tiny model's time goes to its 248,320-row output layer, read k + 1 times
    per step); every k on the transformers checkpoint below and in bench/bench_speculative.py."""
    plain = list(generate_ids(tiny, PROMPT, max_new_tokens=N))
    for k in (1, 4):
        stats = {}
        assert list(speculative_ids(tiny, PROMPT, k, max_new_tokens=N, stats=stats)) == plain, k
        assert stats["new_tokens"] == N and stats["rounds"] >= N // (k + 1)


@pytest.fixture(scope="module")
def hf_plain(hf_model):
    return list(generate_ids(hf_model, HF_PROMPT, max_new_tokens=N))


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_speculative_equals_plain_greedy_on_a_transformers_checkpoint(hf_model, hf_plain, k):
    plain = hf_plain
    stats = {}
    assert list(speculative_ids(hf_model, HF_PROMPT, k, max_new_tokens=N, stats=stats)) == plain
    assert stats["new_tokens"] == N


def _replay(plain, wrong_at=(), vocab=512):
    """Drafts replaced by the plain run's next tokens (accepted), or by a wrong token at the chosen
    positions of the output (rejected there)."""
    def drafts(out, guesses):
        tokens = plain[len(out):len(out) + len(guesses)]
        return [(t + 1) % vocab if len(out) + j in wrong_at else t for j, t in enumerate(tokens)]
    return drafts


def _same_cache(a, b, atol=1e-5):
    assert a.length == b.length
    for x, y in zip(a.layers, b.layers):
        for name in ("k", "v", "conv", "state"):
            s, t = getattr(x, name), getattr(y, name)
            assert (s is None) == (t is None), name
            if s is not None:
                assert s.shape == t.shape and torch.allclose(s.float(), t.float(), atol=atol), name


@pytest.mark.parametrize("k", [1, 3, 4])
@pytest.mark.parametrize("path", ["all accepted", "all rejected", "mixed"])
def test_forced_paths_give_plain_greedy_and_the_plain_caches(hf_model, k, path):
    n = 24
    plain_cache = hf_model.new_cache()
    plain = list(generate_ids(hf_model, HF_PROMPT, max_new_tokens=n, cache=plain_cache))
    wrong = {"all accepted": (), "all rejected": range(n), "mixed": (2, 3, 7, 12, 13, 14, 20)}[path]
    cache, stats = hf_model.new_cache(), {}
    out = list(speculative_ids(hf_model, HF_PROMPT, k, max_new_tokens=n, cache=cache, stats=stats,
                               guess=replaying(_replay(plain, wrong))))
    assert out == plain
    if path == "all accepted":
        assert stats["accepted"] == stats["drafted"] > 0 and stats["rounds"] == -(-(n - 1) // (k + 1))
    elif path == "all rejected":
        assert stats["accepted"] == 0 and stats["rounds"] == n - 1
    else:
        assert 0 < stats["accepted"] < stats["drafted"]
    _same_cache(cache, plain_cache)                               # read: the prompt and all but the last token

    # the head's cache: what the head holds after reading (x_{i+1}, hidden_i) for every position it
    # reached, with the model's hidden states (never its own guesses)
    tokens = HF_PROMPT + plain
    keep = []
    hf_model(torch.tensor([tokens[:-1]]), keep=keep)
    hidden = hf_model.norm(keep[-1])                              # (1, read, hidden): after the final norm
    head = cache.mtp[0]
    L = head.k.shape[2]
    ref = hf_model.mtp.new_cache()
    head_read(hf_model, tokens[1:L + 1], hidden[:, :L], ref, 0)
    assert L >= len(tokens) - 1 - (k + 2)                        # the last one or two rounds need no draft
    assert torch.allclose(head.k, ref[0].k, atol=1e-5) and torch.allclose(head.v, ref[0].v, atol=1e-5)


def test_stop_tokens_and_max_new_tokens_as_plain_generation(hf_model):
    plain = list(generate_ids(hf_model, HF_PROMPT, max_new_tokens=30))
    stop = {plain[9]}
    want = list(generate_ids(hf_model, HF_PROMPT, max_new_tokens=30, stop=stop))
    assert want[-1] == plain[9] and len(want) <= 10
    for k in (1, 3):
        assert list(speculative_ids(hf_model, HF_PROMPT, k, max_new_tokens=30, stop=stop)) == want
        for n in (0, 1, 2, 5):
            cache, plain_cache = hf_model.new_cache(), hf_model.new_cache()
            got = list(speculative_ids(hf_model, HF_PROMPT, k, max_new_tokens=n, cache=cache,
                                       guess=replaying(_replay(plain))))
            assert got == list(generate_ids(hf_model, HF_PROMPT, max_new_tokens=n, cache=plain_cache)) == plain[:n]
            _same_cache(cache, plain_cache)


def test_accept_rule():
    assert accepted([5, 6, 7], [5, 6, 7, 8]) == (3, 8)            # all agree: the model's 4th token too
    assert accepted([5, 6, 7], [5, 9, 7, 8]) == (1, 9)            # first disagreement: the model's token
    assert accepted([5, 6, 7], [4, 6, 7, 8]) == (0, 4)
    assert accepted([], [3]) == (0, 3)


def test_draft_vocabulary_helpers():
    assert frequent_tokens([[3, 1, 3], [2, 3, 1]], 2) == [3, 1]
    assert coverage([3, 1], [3, 1, 2, 3]) == 0.75


def test_a_cut_draft_vocabulary_keeps_the_output_exact(tiny):
    from engine.speculative import DraftVocabulary
    plain = list(generate_ids(tiny, PROMPT, max_new_tokens=12))
    cut = DraftVocabulary(tiny, range(1000))
    assert len(cut) == 1000
    assert list(speculative_ids(tiny, PROMPT, 3, max_new_tokens=12, guess=cut)) == plain


@pytest.mark.parametrize("k", [0, -1, 2.5, True, "3", 9])
def test_bad_k_is_one_line(hf_model, k):
    with pytest.raises(QwenError) as e:
        next(speculative_ids(hf_model, HF_PROMPT, k, max_new_tokens=4))
    assert "speculative" in str(e.value) and "\n" not in str(e.value)


# The accept / reject rule on a small vocabulary: p and q chosen far apart (q puts most of its mass
# where p has little), so that a broken rule is far off; 3 rounds of k = 2 drafts per trial.
P_ROWS = torch.tensor([[0.50, 0.25, 0.15, 0.07, 0.03, 0.00],
                       [0.05, 0.05, 0.10, 0.20, 0.30, 0.30],
                       [0.30, 0.00, 0.30, 0.00, 0.40, 0.00]], dtype=torch.float64)     # (k + 1, vocab)
Q_ROWS = torch.tensor([[0.05, 0.05, 0.10, 0.20, 0.30, 0.30],
                       [0.40, 0.30, 0.10, 0.10, 0.05, 0.05]], dtype=torch.float64)     # (k, vocab)
TRIALS = 2000
CHI2_LIMIT = 20.5              # chi-square, 5 degrees of freedom: exceeded with probability 0.001 when right


def _emitted(rule, seed=0):
    """The rule run TRIALS times on drafts drawn from Q_ROWS: counts (3, vocab) of the tokens emitted
    at each place of a round (the first always; the second when the first draft was kept; ...)."""
    g = torch.Generator().manual_seed(seed)
    counts = torch.zeros(3, 6, dtype=torch.float64)
    all_drafts = torch.multinomial(Q_ROWS, TRIALS, replacement=True, generator=g).t().tolist()   # (TRIALS, k)
    for drafts in all_drafts:
        a, nxt = rule(drafts, Q_ROWS, P_ROWS, g)
        for j, t in enumerate(drafts[:a] + [nxt]):
            counts[j, t] += 1
    return counts


def _chi2(counts, probs):
    """Pearson's statistic of counts (vocab,) against probs (vocab,), over the tokens probs allows
    (a token it forbids, seen even once, is an infinite statistic)."""
    n = counts.sum()
    if (counts[probs == 0] > 0).any():
        return float("inf")
    expected = n * probs[probs > 0]
    return float(((counts[probs > 0] - expected) ** 2 / expected).sum())


def _accept_always(drafts, q, p, g):
    return len(drafts), int(torch.multinomial(p[len(drafts)], 1, generator=g))


def _resample_from_p(drafts, q, p, g):
    for j, d in enumerate(drafts):
        if torch.rand((), dtype=torch.float64, generator=g) * q[j, d] >= p[j, d]:
            return j, int(torch.multinomial(p[j], 1, generator=g))       # p, not norm(max(0, p - q))
    return len(drafts), int(torch.multinomial(p[len(drafts)], 1, generator=g))


def test_the_accept_reject_rule_keeps_the_models_distribution():
    """Each emitted place's empirical distribution matches the model's p at that place (chi-square
    below the 0.001 threshold); accepting every draft, or drawing a rejected place again from p
    instead of norm(max(0, p - q)), is far above it."""
    from qwen.mtp import accept_sampled
    counts = _emitted(accept_sampled)
    assert counts[0].sum() == TRIALS and counts[1].sum() > 200 and counts[2].sum() > 50      # every place reached
    for j in range(3):
        assert _chi2(counts[j], P_ROWS[j]) < CHI2_LIMIT, (j, counts[j], _chi2(counts[j], P_ROWS[j]))
    for broken in (_accept_always, _resample_from_p):
        wrong = _emitted(broken)
        assert max(_chi2(wrong[j], P_ROWS[j]) for j in range(2)) > 5 * CHI2_LIMIT, broken.__name__


def test_speculative_sampling_draws_only_what_plain_sampling_can_and_repeats_with_its_seed(hf_model):
    """top_k = 2: every token must be one of the model's 2 most likely after the tokens before it
    (the random head's drafts mostly are not, so a rule that kept them would fail); the same seed
    gives the same tokens, another seed others; drafts were drawn and some replaced."""
    settings = dict(max_new_tokens=24, temperature=1.0, top_k=2, seed=0)
    stats = {}
    out = list(speculative_ids(hf_model, HF_PROMPT, 3, stats=stats, **settings))
    assert len(out) == 24 and stats["drafted"] > 0 and stats["accepted"] < stats["drafted"]
    tokens = torch.tensor([HF_PROMPT + out])
    top2 = hf_model(tokens)[0, len(HF_PROMPT) - 1:-1].topk(2).indices                     # (24, 2)
    assert all(t in row.tolist() for t, row in zip(out, top2))
    assert list(speculative_ids(hf_model, HF_PROMPT, 3, **settings)) == out
    assert list(speculative_ids(hf_model, HF_PROMPT, 3, **{**settings, "seed": 1})) != out


def test_a_checkpoint_without_mtp_has_no_head_and_says_so_in_one_line(tmp_path):
    folder = write_transformers_checkpoint(tmp_path / "plain", layout="text")
    model = load_model(folder)
    assert model.mtp is None
    with pytest.raises(QwenError) as e:
        next(speculative_ids(model, HF_PROMPT, 3, max_new_tokens=4))
    assert "mtp" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("how", ["partial", "mis-shaped", "integer", "extra"])
def test_a_broken_head_leaves_the_text_model_whole_and_says_why_in_one_line(hf_folder, tmp_path, how):
    """A partial, mis-shaped or extra mtp.* set does not stop the load (the head is optional: advice about
    the config or "did you mean" names would block plain decoding): model.mtp is None, plain decoding works,
    and --speculative says in one line which file and key, with both shapes; the rest of the checkpoint
    stays strict."""
    from safetensors.torch import load_file, save_file
    folder = write_transformers_checkpoint(tmp_path / how, layout="text")
    file = folder / "model.safetensors"
    head = {k: v for k, v in load_file(hf_folder / "model.safetensors").items() if k.startswith("mtp.")}
    if how == "partial":
        head = {"mtp.fc.weight": head["mtp.fc.weight"]}
        said = ["the MTP head's tensor mtp.pre_fc_norm_embedding.weight is missing", "needs shape [16]"]
    elif how == "mis-shaped":
        head["mtp.layers.0.mlp.up_proj.weight"] = torch.zeros(7, 16)
        said = ["mtp.layers.0.mlp.up_proj.weight has shape [7, 16], the head needs [32, 16]"]
    elif how == "integer":                                       # not refused by load_model: plain decoding works
        head["mtp.fc.weight"] = head["mtp.fc.weight"].to(torch.int32)
        said = ["the MTP head's tensor mtp.fc.weight is stored as I32, but weights are floating-point numbers"]
    else:
        head["mtp.layers.1.input_layernorm.weight"] = torch.zeros(16)
        said = ["mtp.layers.1.input_layernorm.weight is not a tensor of the MTP head config.json describes (1 layer(s))"]
    save_file({**load_file(file), **head}, file, metadata={"format": "pt"})
    model = load_model(folder)
    load_head(model)
    assert model.mtp is None and all(s in str(model.mtp_problem) for s in said), str(model.mtp_problem)
    assert str(file) in str(model.mtp_problem)
    plain = list(generate_ids(model, HF_PROMPT, max_new_tokens=8))
    assert len(plain) == 8
    with pytest.raises(QwenError) as e:
        next(speculative_ids(model, HF_PROMPT, 3, max_new_tokens=4))
    line = str(e.value)
    assert all(s in line for s in said) and "run without --speculative" in line and "\n" not in line, line
    tensors = load_file(file)
    tensors["model.layers.0.mlp.up_proj.weight"] = torch.zeros(7, 16)                # the text model: strict
    save_file(tensors, file, metadata={"format": "pt"})
    with pytest.raises(QwenError, match=r"layers\.0\.mlp\.up_proj\.weight.*\[32, 16\].*\[7, 16\]"):
        load_model(folder)


def test_a_chat_with_speculative_decoding_says_what_plain_greedy_says(tiny_path, tiny):
    """Two turns: the same replies, and the live cache it keeps (continued the next turn) as plain's."""
    from engine.conversation import Chat
    from qwen.tokenizer import Tokenizer
    tok = Tokenizer.load(tiny_path)
    plain, spec = Chat(tiny, tok), Chat(tiny, tok, speculative=2)
    for text in ("hi", "and then?"):
        assert "".join(spec.say(text, max_new_tokens=6)) == "".join(plain.say(text, max_new_tokens=6))
        assert spec.read == plain.read
        _same_cache(spec.cache, plain.cache)


def test_the_head_reads_the_hidden_state_after_the_final_norm(hf_model):
    """As vLLM and SGLang feed it: the head's cache holds what norm(last layer's output) gives, not
    what the raw residual stream would."""
    cache = hf_model.new_cache()
    list(speculative_ids(hf_model, HF_PROMPT, 1, max_new_tokens=3, cache=cache))   # one round drafts
    p = list(generate_ids(hf_model, HF_PROMPT, max_new_tokens=1))[0]
    keep = []
    hf_model(torch.tensor([HF_PROMPT]), keep=keep)
    k = {}
    for side, hidden in (("after", hf_model.norm(keep[-1])), ("before", keep[-1])):
        ref = hf_model.mtp.new_cache()
        head_read(hf_model, HF_PROMPT[1:] + [p], hidden, ref, 0)
        k[side] = ref[0].k
    read = cache.mtp[0].k[:, :, :len(HF_PROMPT)]                  # the prompt's pairs, then p's
    assert torch.allclose(read, k["after"], atol=1e-5)
    assert not torch.allclose(read, k["before"], atol=1e-3)


def test_teacher_forced_acceptance_counts_the_heads_agreements_along_a_text(hf_model):
    """Against a loop: at each t, the head's guess from (ids[t + 1], hidden_t) and the model's greedy
    token after ids[0 .. t + 1], each computed from scratch."""
    from engine.speculative import teacher_forced_acceptance
    text = [5, 11, 100, 7, 42, 42, 300, 9, 1, 77]
    share, n = teacher_forced_acceptance(hf_model, text, rows=3)
    agree = 0
    for t in range(len(text) - 2):
        keep = []
        hf_model(torch.tensor([text[:t + 2]]), keep=keep)
        hidden = hf_model.norm(keep[-1])                                    # (1, t + 2, hidden)
        greedy = int(hf_model.logits(hidden[0, -1]).argmax())
        g = head_read(hf_model, text[1:t + 2], hidden[:, :t + 1], None, 0)
        agree += int(hf_model.logits(g[0, -1]).argmax()) == greedy
    assert n == len(text) - 2 and share == agree / n
    with pytest.raises(QwenError, match="3 tokens"):
        teacher_forced_acceptance(hf_model, [1, 2])


def test_the_fast_verify_pass_computes_what_the_plain_one_does(hf_model, monkeypatch):
    """The verify pass through engine/products.py's paths (oneDNN, or the product turned around):
    the same numbers to fp32 rounding, the same greedy tokens, the same trails; the model's layers are
    put back after (a plain forward afterwards uses F.linear again). This checkpoint's layers are all
    under products.MIN_VALUES: the floor is lowered, or fast and plain would be the same products."""
    from engine import products
    from qwen.mtp import verify as _verify
    from engine.products import few_rows_linear
    monkeypatch.setattr(products, "MIN_VALUES", 1)
    rows, real = [], products.linear
    monkeypatch.setattr(products, "linear", lambda x, w: rows.append(x.numel() // x.shape[-1]) or real(x, w))
    g = torch.Generator().manual_seed(3)
    w, x = torch.randn(40, 16, generator=g), torch.randn(1, 5, 16, generator=g)
    assert torch.allclose(few_rows_linear(x, w), torch.nn.functional.linear(x, w), atol=1e-5, rtol=1e-5)
    assert few_rows_linear(x, w).shape == (1, 5, 40)
    base = hf_model.new_cache()
    hf_model(torch.tensor([HF_PROMPT]), cache=base)
    block = [3, 17, 99, 250]
    with products.fast():
        fast, fast_h, fast_trails = _verify(hf_model, block, base.copy())
    assert rows and set(rows) == {len(block)}                            # every product: the block's 4 rows
    rows.clear()
    plain, plain_h, plain_trails = _verify(hf_model, block, base.copy())
    assert rows == []                                                    # F.linear only
    assert torch.allclose(fast, plain, atol=1e-4, rtol=1e-4) and torch.equal(fast.argmax(-1), plain.argmax(-1))
    assert torch.allclose(fast_h, plain_h, atol=1e-5, rtol=1e-4)
    for a, b in zip(fast_trails, plain_trails):
        if a is not None:
            assert all(torch.allclose(s, t, atol=1e-5) for s, t in zip(a.states, b.states))
    assert "forward" not in vars(hf_model.layers[0].mlp.up_proj) and "logits" not in vars(hf_model)


def test_a_run_reuses_its_trails_memory_and_the_cache_owns_the_states_it_gets_back(hf_model):
    """A verify pass writes its states into the trails' memory, which the next pass of the same run
    writes again (no fresh 1 MB per token on the full-size model); so `settle` hands the cache a copy:
    a copy of the cache kept between two passes (a chat's next turn) is left as it was."""
    from qwen.mtp import new_trails, settle, verify as _verify
    base = hf_model.new_cache()
    hf_model(torch.tensor([HF_PROMPT]), cache=base)
    trails, cache = new_trails(hf_model), base.copy()
    assert _verify(hf_model, [3, 17, 99, 250], cache, trails=trails)[2] is trails
    memory = [t.memory.data_ptr() for t in trails if t is not None]
    assert memory and all(t.states.shape[0] == 4 for t in trails if t is not None)
    settle(hf_model, cache, trails, len(HF_PROMPT), 2)
    kept = cache.copy()
    held = [lc.state.clone() for lc in kept.layers if lc.state is not None]
    _verify(hf_model, [99, 8, 9], cache, trails=trails)                  # 3 tokens: the same memory
    assert [t.memory.data_ptr() for t in trails if t is not None] == memory
    assert all(t.states.shape[0] == 3 for t in trails if t is not None)
    assert all(torch.equal(lc.state, s) for lc, s in zip([lc for lc in kept.layers if lc.state is not None], held))


def test_a_trail_makes_its_memory_where_the_states_are():
    """Trail.slots: fp32 on the device asked for, the memory kept while the shape fits, new when a
    pass is longer, of another batch or on another device."""
    from qwen.deltanet import Trail
    t = Trail()
    first = t.slots((4, 1, 2, 3, 3), "cpu")
    assert first.shape == (4, 1, 2, 3, 3) and first.dtype == torch.float32 and t.states is first
    assert t.slots((2, 1, 2, 3, 3), "cpu").data_ptr() == first.data_ptr() and t.states.shape[0] == 2
    assert t.slots((5, 1, 2, 3, 3), "cpu").shape[0] == 5 and t.memory.shape[0] == 5
    assert t.slots((5, 2, 2, 3, 3), "cpu").shape[1] == 2
    assert t.slots((5, 2, 2, 3, 3), "meta").device.type == "meta" and t.memory.device.type == "meta"


def test_a_verify_pass_with_autograd_on_and_weights_that_want_gradients(hf_folder):
    """A learner may call _verify on a model they train (requires_grad on its weights, autograd on): the
    trails are written with out=, which autograd cannot record, so the pass records nothing, and its
    tokens and trails are those of the pass under no_grad."""
    from qwen.mtp import verify as _verify
    m = load_model(hf_folder)
    base = m.new_cache()
    with torch.no_grad():
        m(torch.tensor([HF_PROMPT]), cache=base)
        want, _, want_trails = _verify(m, [3, 17, 99], base.copy())
    m.requires_grad_(True)
    got, _, trails = _verify(m, [3, 17, 99], base.copy())
    assert not got.requires_grad and torch.equal(got, want)
    assert all(torch.equal(a.states, b.states) for a, b in zip(trails, want_trails) if a is not None)
