"""Generation pieces: cache bookkeeping, sampling (against transformers' warpers), stop tokens,
the chat template (against transformers' apply_chat_template), UTF-8 streaming, the loop."""
import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.sampling import top_k_filter
from engine.shapes import kv_cache_bytes
from qwen.generate import (Cache, ChatTemplate, LayerCache, TextStream, generate, generate_ids, sample, stop_ids,
                           top_p_filter)
from qwen.lang import QwenError


@pytest.fixture(scope="module")
def tok(tiny_path):
    from qwen.tokenizer import Tokenizer
    return Tokenizer.load(tiny_path)


def test_layer_cache_starts_empty_and_counts_its_bytes():
    c = LayerCache()
    assert (c.k, c.v, c.conv, c.state) == (None, None, None, None) and c.nbytes == 0
    c.update(torch.zeros(1, 2, 5, 16), torch.zeros(1, 2, 5, 16))
    c.state = torch.zeros(1, 4, 8, 8)
    assert c.k.shape == (1, 2, 5, 16) and c.nbytes == (2 * 2 * 5 * 16 + 4 * 8 * 8) * 4    # in use, not the buffers
    cache = Cache(3)
    cache[1].update(*[torch.zeros(1, 2, 5, 16, dtype=torch.bfloat16)] * 2)
    assert len(cache) == 3 and cache.length == 0 and cache.nbytes == 2 * 2 * 5 * 16 * 2


def test_kv_cache_bytes_for_the_real_shapes():
    from types import SimpleNamespace
    cfg = SimpleNamespace(num_hidden_layers=24, num_key_value_heads=2, head_dim=256)
    assert kv_cache_bytes(cfg, 1024, 2) == 24 * 2 * 2 * 256 * 1024 * 2          # 50.3 MB in bf16
    assert kv_cache_bytes(cfg, 1024, 2, layers=6) * 4 == kv_cache_bytes(cfg, 1024, 2)


def test_top_p_keeps_the_token_that_crosses_p():
    logits = torch.tensor([0.5, 0.3, 0.2]).log()
    kept = lambda p: torch.isfinite(top_p_filter(logits, p)).nonzero().flatten().tolist()   # noqa: E731
    assert kept(0.4) == [0]            # 0.5 already reaches 0.4
    assert kept(0.6) == [0, 1]         # 0.5 < 0.6, 0.5 + 0.3 crosses it: the 0.3 token stays
    assert kept(0.75) == [0, 1]
    assert kept(0.9) == [0, 1, 2]
    assert kept(1.0) == [0, 1, 2]


def test_top_k_and_top_p_equal_transformers_warpers():
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper
    g = torch.Generator().manual_seed(0)
    for trial in range(20):
        logits = torch.randn(1, 500, generator=g) * (1 + trial % 4)
        for p in (0.1, 0.5, 0.9, 0.99):
            ours = torch.isfinite(top_p_filter(logits, p))
            ref = torch.isfinite(TopPLogitsWarper(p)(None, logits.clone()))
            assert torch.equal(ours, ref), (trial, p)
        for k in (1, 5, 50):
            assert torch.equal(top_k_filter(logits, k), TopKLogitsWarper(k)(None, logits.clone()))


def test_sampling_is_greedy_at_zero_temperature_and_repeatable_with_a_seed():
    logits = torch.tensor([1.0, 3.0, 2.0, 0.5])
    assert sample(logits) == 1
    draw = lambda seed: [sample(logits, 1.0, generator=g) for g in [torch.Generator().manual_seed(seed)]  # noqa: E731
                         for _ in range(50)]
    assert draw(7) == draw(7) and draw(7) != draw(8)
    assert {sample(logits, 1.0, top_k=2, generator=torch.Generator().manual_seed(s)) for s in range(40)} == {1, 2}


def test_sampled_frequencies_follow_the_softmax():
    logits = torch.tensor([0.0, 1.0, 2.0])
    g = torch.Generator().manual_seed(0)
    counts = torch.bincount(torch.tensor([sample(logits, 1.0, generator=g) for _ in range(6000)]), minlength=3)
    expected = logits.softmax(-1) * 6000
    assert ((counts - expected).abs() < 5 * expected.sqrt()).all(), (counts, expected)   # within 5 sigma


def test_stop_tokens(tok):
    assert stop_ids(tok) == {248046, 248044}                           # <|im_end|>, <|endoftext|>


def test_text_stream_waits_for_characters_split_across_tokens(tok):
    text = "你好，世界！Grüße 😀 饕餮 ∑x"
    ids = tok.encode(text)
    stream = TextStream(tok)
    pieces = [stream.push(i) for i in ids] + [stream.flush()]
    assert "".join(pieces) == text and not any("\ufffd" in p for p in pieces)
    assert any(not tok.token_bytes(i).decode("utf-8", "ignore") == tok.token_bytes(i).decode("utf-8", "replace")
               for i in ids)                                           # some token really holds a partial character
    assert "" in pieces[:-1]                                            # ... and the stream waited for the rest


def test_text_stream_flushes_an_unfinished_character_as_a_replacement(tok):
    stream = TextStream(tok)
    head = [i for i in tok.encode("饕") if tok.token_bytes(i) != "饕".encode()]
    partial = head[0] if head else tok.vocab["æ"]                        # one byte of a 3-byte character
    assert stream.push(partial) == "" and stream.flush() == "\ufffd"


# --------------------------------------------------------------------------------------------- template

@pytest.fixture(scope="module")
def hf_tok(tiny_path):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(tiny_path))


CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "你好"}],
    [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "<think>\nadd\n</think>\n\n4"},
     {"role": "user", "content": "and 3+3?"}],
    [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4", "reasoning_content": "easy"}],
]


@pytest.mark.parametrize("messages", CONVERSATIONS)
@pytest.mark.parametrize("options", [{}, {"enable_thinking": True}, {"enable_thinking": False}])
def test_chat_template_renders_as_transformers_does(tiny_path, hf_tok, messages, options):
    ours = ChatTemplate.load(tiny_path).render(messages, add_generation_prompt=True, **options)
    assert ours == hf_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **options)
    tail = "<think>\n\n</think>\n\n" if options.get("enable_thinking") is False else "<think>\n"
    assert ours.endswith("<|im_start|>assistant\n" + tail)


def test_chat_template_thinking_blocks(tiny_path):
    t = ChatTemplate.load(tiny_path)
    earlier = t.render(CONVERSATIONS[2], add_generation_prompt=False)
    assert "add" not in earlier and "<|im_start|>assistant\n4<|im_end|>\n" in earlier   # old reasoning dropped
    last = t.render(CONVERSATIONS[3], add_generation_prompt=False)
    assert last.endswith("<|im_start|>assistant\n<think>\neasy\n</think>\n\n4<|im_end|>\n")
    with pytest.raises(QwenError, match="refused"):
        t.render([{"role": "robot", "content": "x"}])
    with pytest.raises(QwenError, match="role"):
        t.render([{"text": "x"}])


def test_missing_template_is_one_clear_message(tmp_path):
    with pytest.raises(QwenError, match="no chat_template.jinja"):
        ChatTemplate.load(tmp_path)


# --------------------------------------------------------------------------------------------- the loop

class ScriptedModel:
    """A stand-in model: its next token is the next id of a script, whatever the input. Records calls."""

    def __init__(self, script, vocab=248320):
        self.script, self.vocab, self.calls = list(script), vocab, []

    def new_cache(self):
        return Cache(2)

    def __call__(self, ids, cache=None, last=False):
        self.calls.append((ids.shape[1], cache.length, last))
        cache.length += ids.shape[1]
        logits = torch.zeros(1, 1, self.vocab)
        logits[0, 0, self.script[len(self.calls) - 1]] = 1.0
        return logits


def test_generate_prefills_once_then_decodes_one_token_at_a_time(tok):
    reply = "猫 sat. 😀"
    script = tok.encode(reply) + [248046, 11, 12]
    model = ScriptedModel(script)
    stats, ids = {}, []
    text = list(generate(model, tok, [1, 2, 3, 4, 5], max_new_tokens=50, stats=stats, ids_out=ids))
    assert "".join(text) == reply and ids == script[:len(script) - 2]
    n = len(ids)
    assert model.calls == [(5, 0, True)] + [(1, 5 + i, True) for i in range(n - 1)]   # positions continue
    assert stats["prompt_tokens"] == 5 and stats["new_tokens"] == n and stats["stopped"]


def test_generate_stops_at_max_new_tokens_and_plain_text_prompts(tok):
    model = ScriptedModel(tok.encode(" one two three four five six"))
    out = "".join(generate(model, tok, "Count:", chat=False, max_new_tokens=3))
    assert out == " one two three" and len(model.calls) == 3
    assert list(generate_ids(ScriptedModel([7, 8]), [1], max_new_tokens=1)) == [7]


def test_generate_never_picks_the_padding_rows_past_the_vocabulary(tok):
    """The output layer has 248,320 rows for the tokenizer's 248,077 ids, and random weights pick the
    padding rows: a padding id would stop `python main.py 9 --tiny --prompt "''"` in section 4 with "Token
    id 248309 is out of range". generate picks among the tokenizer's ids only; generate_ids, given no
    vocab, any row."""
    pad = tok.vocab_size + 232                                      # a padding row, the model's favourite
    hello = tok.encode("Hi")

    class Favours(ScriptedModel):
        def __call__(self, ids, cache=None, last=False):
            logits = super().__call__(ids, cache, last)
            logits[0, 0, hello[0]] = 0.5                            # the best real token
            return logits

    ids = []
    text = "".join(generate(Favours([pad, pad]), tok, [1, 2], chat=False, max_new_tokens=2, ids_out=ids))
    assert ids == [hello[0]] * 2 and text == tok.decode(ids)
    ids = []
    list(generate(Favours([pad, pad]), tok, [1, 2], chat=False, max_new_tokens=2, temperature=1.0, top_k=2,
                  seed=0, ids_out=ids))
    assert all(i < tok.vocab_size for i in ids)
    assert list(generate_ids(Favours([pad]), [1], max_new_tokens=1)) == [pad]


def test_generate_applies_the_chat_template(tok, tiny_path):
    model = ScriptedModel([248046])
    model.path = tiny_path
    assert list(generate(model, tok, "Hi", enable_thinking=False)) == []
    expected = tok.encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert model.calls == [(len(expected), 0, True)]
    with pytest.raises(QwenError, match="empty"):
        list(generate_ids(model, [], max_new_tokens=1))


def test_chat_continues_the_cache_when_the_history_is_unchanged(tok):
    from engine.conversation import Chat
    plain = ChatTemplate("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                         "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    reply = tok.encode("Fine, thanks.")
    # each prompt is read in two calls, the first one's logits unused (a copy of the cache is kept between)
    model = ScriptedModel([0] + reply + [248046] + [0] + reply + [248046])
    chat = Chat(model, tok, template=plain)
    assert "".join(chat.say("Hi")) == "Fine, thanks." and chat.reused == 0
    first = len(model.calls)
    assert "".join(chat.say("And you?")) == "Fine, thanks."
    assert chat.reused == len(tok.encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")) + len(reply)
    assert model.calls[first][1] == chat.reused                  # the second turn starts where the cache stopped
    assert [m["role"] for m in chat.messages] == ["user", "assistant"] * 2
    chat.reset()
    assert chat.messages == [] and chat.cache.length == 0


def test_chat_continues_from_a_kept_copy_when_the_template_rewrites_the_history(tok, tiny_path):
    """Qwen3.5's format drops old think blocks, so the next prompt parts from this one after the last
    '<|im_start|>assistant\n': the cache copied there continues, instead of reading from 0 again."""
    from engine.conversation import Chat
    model = ScriptedModel([0] + tok.encode("Hello") + [248046] + [0] + tok.encode("Bye") + [248046])
    model.path = tiny_path
    chat = Chat(model, tok)
    assert "".join(chat.say("Hi")) == "Hello"
    first = len(model.calls)
    parted = len(tok.encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"))
    assert model.calls[0][0] == parted and model.calls[1][:2] == (4, parted)   # <think>\n\n</think>\n\n after it
    assert "".join(chat.say("Go")) == "Bye" and chat.reused == parted
    assert model.calls[first][1] == parted                       # read from where the copy was kept
    assert chat.prompt_tokens == len(chat.ids(chat.messages[:3]))


def test_top_k_sampling_draws_from_the_renormalized_k_best():
    logits = torch.tensor([0.0, 1.0, 2.0, -1.0])
    g = torch.Generator().manual_seed(0)
    counts = torch.bincount(torch.tensor([sample(logits, 1.0, top_k=2, generator=g) for _ in range(4000)]),
                            minlength=4)
    expected = torch.tensor([0.0, 1.0, 2.0]).exp()[1:] / torch.tensor([1.0, 2.0]).exp().sum() * 4000
    assert counts[0] == counts[3] == 0 and ((counts[1:3] - expected).abs() < 5 * expected.sqrt()).all()


def test_chat_loop_streams_resets_and_reports_the_cache_in_readable_units(tiny_path, capsys):
    from engine.chat import chat_loop
    lines = iter(["hello", "", "again", "/reset", "你好"])

    def read(prompt):
        try:
            return next(lines)
        except StopIteration:
            raise EOFError from None
    chat_loop(tiny_path, max_new_tokens=3, read=read)
    out, err = capsys.readouterr()
    stats = re.findall(r"\[3 tokens; reused (\d+) of (\d+) prompt tokens, read (\d+) in [\d.]+ s, then [\d.]+ "
                       r"tokens/s; cache (\d+) tokens, ([\d.]+) (B|KB|MB)", err)
    assert len(stats) == 3, err                                          # the empty line is skipped
    counts, stats = [tuple(map(int, s[:3])) for s in stats], [s[3:] for s in stats]   # prefill, decode apart
    # the cache holds the prompt plus the reply but its last token (not fed back yet)
    assert all(r + n == m == int(c) - 2 for (r, m, n), (c, *_) in zip(counts, stats))
    assert counts[0][0] == 0 and counts[1][0] > 0 and counts[2][0] == 0     # kept for "again", not after /reset
    assert int(stats[1][0]) > int(stats[0][0]) and int(stats[2][0]) < int(stats[1][0])   # grows; /reset empties it
    assert all(float(n) > 0 for _, n, _ in stats)                       # a tiny cache is not shown as '0.0 MB'
    assert "(conversation and cache cleared)" in out and out.rstrip().endswith("Bye.")


GROWTH = r"""
import sys, torch
from qwen.model import load_model
def anon():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("RssAnon")) / 1024
m = load_model(sys.argv[1], dtype=torch.bfloat16)
cache = m.new_cache()
with torch.inference_mode():
    m(torch.arange(10)[None], cache=cache, last=True)
    for _ in range(20):
        m(torch.tensor([[3]]), cache=cache, last=True)
    before = anon()
    for _ in range(200):
        m(torch.tensor([[3]]), cache=cache, last=True)
print(anon() - before)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
def test_bf16_decoding_does_not_grow_memory_with_every_token(tiny_path):
    """200 decode steps in bf16 on the tiny model: the process's private memory stays put. With the
    attention's matmuls in bf16, oneDNN kept one kernel per key count: +136 MB here (measured).
    A process of its own, forked from one that has imported torch (tests/forkserver.py)."""
    from forkserver import python
    root = Path(__file__).resolve().parents[1]
    p = python(["-c", GROWTH, str(tiny_path)], cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, timeout=100)
    assert p.returncode == 0, p.stderr[-2000:]
    assert float(p.stdout.split()[-1]) < 20


LEAN = r"""
import sys, torch
from qwen.generate import generate_ids
from qwen.model import load_model
m = load_model(sys.argv[1])
with torch.no_grad():
    list(generate_ids(m, list(range(70)), max_new_tokens=4))              # chunked prefill, recurrent decode
    list(generate_ids(m, list(range(5)), max_new_tokens=3, temperature=0.7, top_k=5, top_p=0.9, seed=0))
print(sorted(n for n in sys.modules if n.split(".")[0] == "sympy" or "symbolic_shapes" in n))
"""


def test_generation_does_not_import_torchs_symbolic_shape_machinery(tiny_path):
    """Loading, prefill, decode and sampling stay off torch.fx's symbolic shapes, which import sympy:
    torch.broadcast_shapes in the delta rule's state check did, at the first decode step of every
    generation (0.3 s and +34 MB, measured). Forked from a process that imported only torch and numpy
    (tests/forkserver.py): what it imported is what a fresh one has (no sympy), for 3 s less CPU."""
    from forkserver import python
    root = Path(__file__).resolve().parents[1]
    p = python(["-c", LEAN, str(tiny_path)], cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, timeout=100)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split("\n")[-2] == "[]"


# --------------------------------------------------------------------------------------------- sampling
# Each behaviour against transformers' warpers (test-only) on the same logits: the kept set and the
# probability vector. At a tie at top-p's cut, both keep the same number of the tied tokens: ours the
# first in vocabulary order, transformers' TopPLogitsWarper those its sort puts first (documented in
# top_p_filter; exercise 232 accepts any of them).

def transformers_probs(logits, temperature, top_k, top_p):
    """The probability vector transformers samples from: its warpers in generate's order, then softmax."""
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper
    z = TemperatureLogitsWarper(float(temperature))(None, logits[None].clone())
    if top_k:
        z = TopKLogitsWarper(top_k)(None, z)
    if top_p < 1:
        z = TopPLogitsWarper(top_p)(None, z)
    return z[0].softmax(-1)


def our_probs(logits, temperature, top_k, top_p):
    """distribution()'s (ids, probs), as a probability vector over the whole vocabulary."""
    from qwen.generate import distribution
    ids, probs = distribution(logits, temperature, top_k, top_p)
    return torch.zeros(logits.shape[-1], dtype=probs.dtype).index_put_((ids,), probs)


def kept(filtered):
    """The kept token ids of one row of logits ((vocab,) or (1, vocab))."""
    return torch.isfinite(filtered).flatten().nonzero().flatten().tolist()


def test_top_k_keeps_the_logits_tied_with_the_kth_as_transformers_does():
    """Logits [3, 2, 2, 2, 1], k = 2: logits.topk(2) would keep one of the three tied 2s ({0.73, 0.27});
    transformers keeps the tie ({0.475, 0.175 x 3}), and so does sample()."""
    logits = torch.tensor([3.0, 2.0, 2.0, 2.0, 1.0])
    ref = transformers_probs(logits, 1.0, 2, 1.0)
    assert torch.allclose(ref, torch.tensor([0.475, 0.175, 0.175, 0.175, 0.0]), atol=5e-4)
    assert torch.allclose(our_probs(logits, 1.0, 2, 1.0), ref, atol=1e-7, rtol=0)
    drawn = {sample(logits, 1.0, top_k=2, generator=torch.Generator().manual_seed(s)) for s in range(100)}
    assert drawn == {0, 1, 2, 3}                             # every tied token can be drawn, the 1 cannot


def test_sampling_distribution_equals_transformers_warpers_with_bf16_ties():
    """Temperature, top-k, top-p in transformers' order. On fp32 logits: the same kept set, the same
    probabilities (to 1e-6). On bf16 logits, which tie often (20,000 logits in bf16's 65,536 values),
    top-p's cut often falls in a tie: both keep the same number of the tied tokens, maybe not the
    same ones, so there the kept probabilities are equal as a sorted list, and every token more
    likely than transformers' least likely kept one is ours too."""
    g = torch.Generator().manual_seed(0)
    settings = [(1.0, 0, 0.9), (0.7, 20, 0.8), (1.3, 50, 1.0), (0.5, 0, 0.5), (2.0, 5, 0.3), (0.7, 1000, 0.95)]
    ties = 0
    for trial in range(12):
        logits = torch.randn(20000, generator=g) * (1 + trial % 3)
        if trial % 2:
            logits = logits.bfloat16()
        for temperature, k, p in settings:
            ref = transformers_probs(logits.float(), temperature, k, p)
            ours = our_probs(logits, temperature, k, p)
            if logits.dtype == torch.bfloat16 and not torch.equal(ours > 0, ref > 0):
                z = logits.float() / temperature
                assert int((ours > 0).sum()) == int((ref > 0).sum()), (trial, temperature, k, p)
                assert bool(((z > z[ref > 0].min()) <= (ours > 0)).all()), (trial, temperature, k, p)
                assert torch.allclose(ours.sort().values, ref.sort().values, atol=1e-6, rtol=0)
                ties += 1
                continue
            assert torch.allclose(ours, ref, atol=1e-6, rtol=0), (trial, temperature, k, p)
    assert ties > 0                                          # the tie rule was exercised


def test_top_p_zero_keeps_the_most_likely_token():
    """top_p = 0 keeps the most likely token, as in transformers: masking every token would make the draw
    fail with 'probability tensor contains either inf, nan'."""
    from transformers.generation.logits_process import TopPLogitsWarper
    logits = torch.randn(1, 1000, generator=torch.Generator().manual_seed(0))
    best = int(logits.argmax())
    assert kept(top_p_filter(logits, 0.0)) == [best] == kept(TopPLogitsWarper(0.0)(None, logits.clone()))
    assert sample(logits[0], 0.7, top_p=0.0, generator=torch.Generator().manual_seed(0)) == best
    assert sample(logits[0], 0.7, top_k=20, top_p=0.0, generator=torch.Generator().manual_seed(0)) == best


def test_top_p_at_an_exact_boundary_keeps_the_smallest_set_that_reaches_p():
    """Probabilities 1/2, 1/4, 1/8, 1/8, from float64 logits whose softmax is exact (logits 0,
    log 1/2, log 1/4: their exp is exactly 1, 1/2, 1/4, the sum 2), so that every sum below is
    exact. When the most likely tokens sum to exactly p, they are the set (the next token's mass
    ahead is p, not below it); a hair above p takes one more. As TopPLogitsWarper, also at the
    tie: of the two equally likely 1/8 tokens, one is needed, the first in vocabulary order.
    (fp32 logits have no such exact case: exp of a rounded log(1/4) is not exactly 1/4.)"""
    from transformers.generation.logits_process import TopPLogitsWarper
    import math
    logits = torch.tensor([math.log(0.25), 0.0, math.log(0.25), math.log(0.5)], dtype=torch.float64)
    probs = torch.tensor([0.125, 0.5, 0.125, 0.25], dtype=torch.float64)
    assert torch.equal(logits.exp() / logits.exp().sum(), probs) and torch.equal(logits.softmax(-1), probs)
    hair = 2.0 ** -40
    for p, expected in [(0.0, [1]), (0.25, [1]), (0.5, [1]), (0.5 + hair, [1, 3]), (0.75, [1, 3])]:
        assert kept(top_p_filter(logits, p)) == expected, p
        assert kept(TopPLogitsWarper(p)(None, logits[None].clone())) == expected, p
    assert kept(top_p_filter(logits, 0.75 + hair)) == [0, 1, 3]              # the tie at the cut: one of two
    assert len(kept(TopPLogitsWarper(0.75 + hair)(None, logits[None].clone()))) == 3
    level = torch.tensor([0.0] * 8 + [-1000.0] * 8)                         # 1/8 each, exact
    assert kept(top_p_filter(level, 0.5)) == [0, 1, 2, 3]                   # any 4 of the 8: the first 4
    assert len(kept(TopPLogitsWarper(0.5)(None, level[None].clone()))) == 4  # transformers: 4 others
    assert kept(top_p_filter(logits, 1.0)) == [0, 1, 2, 3]


def _reference_cut(logits, p):
    """Float64 reference, by a full sort (numpy): the logit of the first token, in descending order,
    at which the running sum of probabilities reaches p; the kept set is every logit above it and,
    of those equal to it, as many as that position needs."""
    a = logits.double().numpy()
    ordered = np.sort(a)[::-1]
    probs = np.exp(ordered - ordered[0])
    probs /= probs.sum()
    cum = np.cumsum(probs)
    return ordered[min(int(np.searchsorted(cum, p)), len(a) - 1)], probs, cum


def _vocab_cases(n, vocab=248320):
    """Seeded logit vectors of the real vocabulary size: flat (thousands of tokens kept: random
    weights), peaked (a few likely tokens: a trained model), some rounded to bf16 (ties)."""
    g = torch.Generator().manual_seed(2024)
    for i in range(n):
        u = torch.rand(4, generator=g).tolist()
        logits = torch.randn(vocab, generator=g) * 10 ** (u[0] * 1.7 - 0.5)           # scale 0.3 .. 16
        if u[1] < 0.3:                                                                 # a few spikes
            spikes = torch.randint(vocab, (1 + int(u[1] * 100),), generator=g)
            logits[spikes] += torch.rand(len(spikes), generator=g) * 15
        if u[2] < 0.25:
            logits = logits.bfloat16().float()
        p = [0.99, 0.999, 0.0][i % 3] if i % 10 == 9 else u[3]
        yield i, logits, p


def test_top_p_over_the_whole_vocabulary_equals_a_float64_reference():
    """100 seeded logit vectors of 248,320 tokens: the kept set is the float64 reference's in every case,
    and holds at least p (to 1e-12: the reference's own sum order). An fp32 descending cumsum puts the
    cut elsewhere than a float64 sum in 142 of 300 (up to 2,566 tokens off), and in 127 keeps less than p."""
    wrong, short = [], []
    for i, logits, p in _vocab_cases(100):
        cut, probs, cum = _reference_cut(logits, p)
        ours = torch.isfinite(top_p_filter(logits, p))
        n_ref = min(int(np.searchsorted(cum, p)), len(cum) - 1) + 1
        x = logits.double()
        if int(ours.sum()) != n_ref or not bool(((x > cut) <= ours).all() and (ours <= (x >= cut)).all()):
            wrong.append((i, p, int(ours.sum()), n_ref))
        if probs[:int(ours.sum())].sum() < p - 1e-12:        # kept = a prefix of the sorted order
            short.append((i, p, float(cum[int(ours.sum()) - 1])))
    assert not wrong and not short, (wrong[:5], short[:5], len(wrong), len(short))


@pytest.mark.parametrize("option, value", [("temperature", -1.0), ("temperature", float("nan")),
                                           ("temperature", float("inf")), ("temperature", "0.7"),
                                           ("top_k", -3), ("top_k", 2.5), ("top_k", True),
                                           ("top_p", 1.5), ("top_p", -0.1), ("top_p", float("nan"))])
def test_bad_sampling_settings_are_refused_in_one_line(option, value):
    """top_p = 1.5, top_k = -3, a negative temperature or nan is refused, not ignored without a word, taken
    as greedy or left to fail inside the draw. transformers refuses them too (ValueError); we say which
    setting, what it may be, in the learner's language, before the prompt is read."""
    from qwen.lang import set_lang
    settings = {"temperature": 0.7, "top_k": 20, "top_p": 0.8, option: value}
    logits = torch.randn(100, generator=torch.Generator().manual_seed(0))
    with pytest.raises(QwenError) as e:
        sample(logits, **settings)
    assert str(e.value).startswith(f"{option} must be ") and "\n" not in str(e.value) and repr(value) in str(e.value)
    set_lang("zh")
    assert str(e.value) == e.value.zh and e.value.zh.startswith(f"{option} 必须是") and "（" in e.value.zh
    model = ScriptedModel([1, 2])
    with pytest.raises(QwenError, match=option):
        list(generate_ids(model, [1, 2], max_new_tokens=2, **settings))
    assert model.calls == []                                 # refused before the prompt was read
    if option == "top_p" and value == value:
        with pytest.raises(QwenError, match="top_p"):
            top_p_filter(logits, value)
    if option == "top_k" and isinstance(value, int) and not isinstance(value, bool):
        with pytest.raises(QwenError, match="top_k"):
            top_k_filter(logits, value)


def test_transformers_refuses_the_same_top_k_and_top_p():
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper
    for make in (lambda: TopKLogitsWarper(-3), lambda: TopPLogitsWarper(1.5), lambda: TopPLogitsWarper(-0.1)):
        with pytest.raises(ValueError):
            make()


def test_zero_temperature_is_greedy_and_draws_nothing():
    """temperature 0 is greedy (documented: transformers' warper refuses 0 and wants do_sample=False):
    the largest logit, whatever top_k and top_p say, and the generator is not advanced."""
    logits = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(5)
    state = g.get_state()
    assert sample(logits, 0.0, top_k=3, top_p=0.1, generator=g) == int(logits.argmax())
    assert sample(logits, 0, generator=g) == int(logits.argmax()) and torch.equal(g.get_state(), state)


def test_top_p_and_sampling_leave_the_logits_unchanged():
    """Float64 logits' .double() is the tensor itself: top-p's in-place exp must not reach them."""
    g = torch.Generator().manual_seed(1)
    for dtype in (torch.float64, torch.float32, torch.bfloat16):
        for scale in (0.5, 10.0):                               # flat (the radix select), peaked (the first 256)
            logits = (torch.randn(10000, generator=g) * scale).to(dtype)
            before = logits.clone()
            top_p_filter(logits, 0.7)
            sample(logits, 1.0, top_p=0.7, generator=g)
            assert torch.equal(logits, before), (dtype, scale)


def test_a_temperature_so_small_that_the_logits_overflow_is_greedy():
    """A temperature of 1e-300 passes the settings check, yet z / temperature overflows to inf (the draw
    would fail: 'probability tensor contains either inf, nan'), and 1e-45 would give nan probabilities.
    Greedy is its limit, so such a temperature draws greedily."""
    from qwen.generate import distribution
    logits = torch.tensor([3.0, 2.0, 2.0, 2.0, 1.0])
    assert sample(logits, 1e-300, generator=torch.Generator().manual_seed(0)) == 0
    ids, probs = distribution(logits, 1e-45)
    assert ids.tolist() == [0] and probs.tolist() == [1.0]
