"""Reading ahead: the checkpoint's multi-token-prediction (MTP) head drafts, the model checks.

Why: a decode step reads every weight of the model to produce one token; on a CPU (and on a GPU
at batch 1) that is memory-bound, so reading k + 1 tokens in one forward pass costs little more
than reading one. Qwen3.5 ships a small extra decoder layer, `mtp.*`, trained to guess the token
after the next. Let it guess k tokens cheaply, then let the main model read all of them at once:
where the model's own greedy choice agrees with a guess, that token was produced for free.

The head, for the token at position t (the model has read tokens 0..t and chosen x_{t+1}):

    e = pre_fc_norm_embedding(embed(x_{t+1}))           (1, T, hidden)  the shared embedding table
    h = pre_fc_norm_hidden(hidden_t)                     (1, T, hidden)  the main model's last hidden
    x = fc(cat[e, h])                                    (1, T, 2 x hidden) -> (1, T, hidden)
    x = decoder layer (full attention, its own KV cache) (1, T, hidden)
    g = mtp.norm(x)                                      (1, T, hidden)
    guess for x_{t+2} = argmax(g @ E.T)                  the shared output layer

hidden_t is taken AFTER the main model's final norm, in both engines that run this head:
vLLM's qwen3_5_mtp.py receives the target model's forward output, which Qwen3_5Model returns
after `self.norm` and to which `compute_logits` applies only the lm_head (vllm/model_executor/
models/qwen3_5.py); SGLang's qwen3_5_mtp.py reads `forward_batch.spec_info.hidden_states`, the
hidden states its target hands to the logits processor, again after the final norm. The next
guess feeds the head its own output g (after mtp.norm) as the hidden, with its own guess as token.

Positions: the head's entry for (x_{t+1}, hidden_t) sits at position t, as in vLLM (RoPE only
sees differences, so any constant shift would give the same numbers).

Speculative decoding (`speculative_ids`), one greedy round:
  1. draft: the head reads what it has not read yet, then guesses d_1 .. d_k, each guess fed back;
  2. verify: the main model reads [p, d_1 .. d_k] (p: the token chosen last) in one forward pass,
     giving its own greedy choice y_0 .. y_k after each of them;
  3. accept: a = the number of leading drafts with d_j = y_{j-1}; the new tokens are
     d_1 .. d_a and y_a, the model's own next token. Every token is the model's greedy choice
     after exactly the tokens before it, so the output is plain greedy decoding's, token for token.
     This exactness is fp32's: k + 1 rows in one matmul are not summed in the order of k + 1
     one-row steps. In fp32 the tests find the same tokens; in bf16 a near-tie between two logits
     can flip (bench/bench_speculative.py prints how many of its bf16 tokens matched).
  Sampling (temperature > 0): the drafts are drawn from the head's warped distribution q and kept
  or replaced by `accept_sampled` (Leviathan et al. 2023; Chen et al. 2023), so the output keeps
  plain sampling's distribution, p.
  4. rollback: the caches must hold what plain decoding would, p, d_1 .. d_a. A KV cache is just
     cut back. A Gated DeltaNet layer's state cannot be cut: it is one matrix that every token
     changed. So while verifying, each linear-attention layer keeps its conv window and its state
     after every token (qwen/deltanet.py `trail`), and the state after d_a is put back, exactly,
     not recomputed. The head's cache is cut back to before its own guesses, which it made from
     its own hidden states; the next round it reads the accepted tokens with the model's.

Cost: a round is k head steps plus one verify pass of k + 1 tokens. With acceptance a per draft
(the chance a guess agrees, given the guesses before it did), a round yields on average
(1 - a^(k+1)) / (1 - a) tokens, so the speed-up over plain decoding is that over
(k x draft / decode + verify / decode). bench/bench_speculative.py measures both ratios. The
head shares the 248k-row output layer, a third of a decode step alone: `DraftVocabulary` lets it
guess among the most frequent tokens only (EAGLE-3 does the same). The main model still decides
every token, so the output stays exact; only the acceptance can drop, by at most the share of
tokens outside the cut (`coverage`).
"""
import collections
import contextlib
import numbers
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from qwen.config import mtp_layers
from qwen.generate import Cache, distribution, sample
from qwen.lang import QwenError
from qwen.model import DecoderLayer
from qwen.norm import RMSNorm
from qwen.weights import FLOAT_DTYPES, load
from qwen.linear import Linear, product

MAX_DRAFTS = 8          # drafts per round: at an acceptance of 0.8 the 9th would be used 13% of the time


class MTPHead(nn.Module):
    """The MTP head: (embedding of the next token, the main model's hidden state) -> a hidden state
    (batch, seq, hidden), after mtp.norm, that the shared output layer turns into a guess."""

    def __init__(self, cfg, layers=1):
        super().__init__()
        H, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.pre_fc_norm_embedding = RMSNorm(H, eps)
        self.pre_fc_norm_hidden = RMSNorm(H, eps)
        self.fc = Linear(2 * H, H, bias=False)                    # [embedding; hidden] -> hidden
        self.layers = nn.ModuleList(DecoderLayer(cfg, None, kind="full_attention") for _ in range(layers))
        self.norm = RMSNorm(H, eps)

    def new_cache(self):
        return Cache(len(self.layers))

    def forward(self, embedded, hidden, cos, sin, cache=None, step=0):
        """embedded (batch, seq, hidden): embed(next tokens); hidden (batch, seq, hidden): the main
        model's last hidden states, after its final norm; cos, sin: the positions' rotations.
        step: which layer (0.8B has one; vLLM cycles through them the same way)."""
        e = self.pre_fc_norm_embedding(embedded)                      # (B, T, H)
        h = self.pre_fc_norm_hidden(hidden.to(embedded.dtype))        # (B, T, H)
        x = self.fc(torch.cat([e, h], -1))                            # (B, T, 2H) -> (B, T, H): embedding first
        i = step % len(self.layers)
        x = self.layers[i](x, cos, sin, None if cache is None else cache[i])
        return self.norm(x)                                           # (B, T, H)


def load_head(cfg, W):
    """The MTP head filled strictly from W's `mtp.*` tensors, or None when the checkpoint has none
    (transformers' save_pretrained drops them). Call `head_problem` first: a partial or mis-shaped
    set is refused here as load() refuses any module's."""
    if not W.names_under("mtp."):
        return None
    with torch.device("meta"):                                        # shapes only, filled by load()
        head = MTPHead(cfg, mtp_layers(cfg))
    return load(head, W, "mtp.")


def head_problem(cfg, W):
    """Why W's `mtp.*` tensors cannot make the head, a QwenError (returned, not raised: str() is its one
    line in the learner's language), or None (all there, or none at all).

    The head is optional: a checkpoint with a tensor of it missing, mis-shaped or extra still has a
    whole text model, so load_model leaves model.mtp None and keeps this line in model.mtp_problem;
    only --speculative needs the head, and says it. (Everything else loads strictly.)"""
    names = W.names_under("mtp.")
    if not names:
        return None
    with torch.device("meta"):
        wanted = {"mtp." + n: tuple(t.shape) for n, t in MTPHead(cfg, mtp_layers(cfg)).state_dict().items()}
    where = lambda key: W.info(key).file                                               # noqa: E731
    for key, shape in wanted.items():
        if key not in W:
            return QwenError("{file}: the MTP head's tensor {key} is missing (the head needs shape {want}, the file has no such "
                     "tensor), so speculative decoding is unavailable; plain decoding works.",
                     "{file}：缺少 MTP 头的张量 {key}（头需要形状 {want}，文件里没有这个张量），所以推测解码不可用；"
                     "普通解码照常可用。", file=where(names[0]), key=key, want=list(shape))
        if tuple(W.shape(key)) != shape:
            return QwenError("{file}: the MTP head's tensor {key} has shape {got}, the head needs {want} (from config.json), so "
                     "speculative decoding is unavailable; plain decoding works.",
                     "{file}：MTP 头的张量 {key} 的形状是 {got}，头需要 {want}（来自 config.json），所以推测解码不可用；"
                     "普通解码照常可用。", file=where(key), key=key, got=list(W.shape(key)), want=list(shape))
        if W.info(key).dtype not in FLOAT_DTYPES:                                      # load_state_dict would raise
            return QwenError("{file}: the MTP head's tensor {key} is stored as {dtype}, but weights are floating-point "
                     "numbers ({floats}), so speculative decoding is unavailable; plain decoding works.",
                     "{file}：MTP 头的张量 {key} 存成了 {dtype}，但权重应是浮点数（{floats}），所以推测解码不可用；"
                     "普通解码照常可用。", file=where(key), key=key, dtype=W.info(key).dtype, floats=", ".join(FLOAT_DTYPES))
    extra = [n for n in names if n not in wanted]
    if extra:
        return QwenError("{file}: {key} is not a tensor of the MTP head config.json describes ({n} layer(s)), so speculative "
                 "decoding is unavailable; plain decoding works.",
                 "{file}：{key} 不是 config.json 所描述的 MTP 头（{n} 层）的张量，所以推测解码不可用；普通解码照常可用。",
                 file=where(extra[0]), key=extra[0], n=mtp_layers(cfg))
    return None


# --------------------------------------------------------------------------------------------
# The head's steps
# --------------------------------------------------------------------------------------------

def head_read(model, tokens, hidden, cache, start, step=0):
    """The head reads pairs (tokens[j], hidden[:, j]) at positions start, start + 1, ...;
    returns its hidden states (1, len(tokens), hidden)."""
    device = model.embed_tokens.weight.device
    ids = torch.as_tensor(tokens, device=device).reshape(1, -1)      # (1, T)
    cos, sin = model.rotary(torch.arange(start, start + ids.shape[1], device=device))
    return model.mtp(model.embed_tokens(ids), hidden, cos, sin, cache, step=step)


class DraftVocabulary:
    """The tokens the head may guess: `ids` (n,), and their rows of the output layer, taken once.

    A guess then costs an (n x hidden) product instead of (248,320 x hidden). The main model still
    chooses every token among all of them, so the output stays exact."""

    def __init__(self, model, ids):
        self.ids = torch.as_tensor(list(ids), dtype=torch.long)
        self.weight = model.output_weight[self.ids].contiguous()      # (n, hidden)

    def __len__(self):
        return len(self.ids)


def head_guess(model, g, vocab=None, cut=None):
    """The head's guess from its hidden state g (1, 1, hidden): the most likely token id, among the
    first `vocab` ids, or among the ids of a DraftVocabulary `cut`."""
    if cut is not None:
        return int(cut.ids[product(g[0, -1], cut.weight).float().argmax()])
    return int(model.logits(g[0, -1])[:vocab].argmax())


def head_scores(model, g, size, cut=None):
    """The head's scores (size,) fp32 from its hidden state g (1, 1, hidden), for sampling a draft:
    the first `size` ids, or only the ids of a DraftVocabulary `cut` (-inf elsewhere)."""
    if cut is None:
        return model.logits(g[0, -1])[:size]
    scores = torch.full((size,), float("-inf"))
    inside = cut.ids < size
    scores[cut.ids[inside]] = product(g[0, -1], cut.weight).float()[inside]
    return scores


def frequent_tokens(token_lists, size):
    """The `size` most frequent ids of some tokenized texts (ties: the smaller id first): a draft
    vocabulary. EAGLE-3 takes them from its training data; the chapter takes the course's prose."""
    counts = collections.Counter(i for ids in token_lists for i in ids)
    return sorted(counts, key=lambda i: (-counts[i], i))[:size]


def coverage(ids, tokens):
    """The share of `tokens` (a list of ids) that are in `ids`: what a draft vocabulary cut to
    `ids` can guess at all, so a bound on the acceptance it keeps."""
    inside = set(int(i) for i in ids)
    return sum(1 for t in tokens if t in inside) / max(1, len(tokens))


@torch.inference_mode()
def teacher_forced_acceptance(model, ids, vocab=None, cut=None, rows=64):
    """How often the head's guess for token t + 2 equals the model's own greedy choice there, along a
    text read as it is (teacher forcing: the text's tokens, not the model's, are the inputs).

    The model reads ids (one pass); the head reads the pairs (ids[t + 1], hidden_t); its guess from
    pair t is compared with the model's greedy token after ids[0 .. t + 1]. Returns (share, number of
    guesses). The chance that a first draft is accepted, on this text."""
    ids = torch.as_tensor(ids, dtype=torch.long).reshape(1, -1)               # (1, T)
    if ids.shape[1] < 3:
        raise QwenError("teacher_forced_acceptance needs a text of 3 tokens or more, got {n}.",
                        "teacher_forced_acceptance 需要至少 3 个词元的文本，实际是 {n} 个。", n=ids.shape[1])
    _, hidden = _forward(model, ids, None, last=True)                         # (1, T, hidden)
    g = head_read(model, ids[0, 1:].tolist(), hidden[:, :-1], None, 0)        # (1, T - 1, hidden)
    agree = 0
    for s in range(0, g.shape[1] - 1, rows):                                  # a few rows of logits at a time
        e = min(s + rows, g.shape[1] - 1)
        greedy = model.logits(hidden[0, s + 1:e + 1])[:, :vocab].argmax(-1)   # the model after ids[.. t + 1]
        if cut is None:
            guess = model.logits(g[0, s:e])[:, :vocab].argmax(-1)
        else:
            guess = cut.ids[product(g[0, s:e], cut.weight).float().argmax(-1)]
        agree += int((guess == greedy).sum())
    n = g.shape[1] - 1
    return agree / n, n


# --------------------------------------------------------------------------------------------
# Rollback
# --------------------------------------------------------------------------------------------

class Trail:
    """What one Gated DeltaNet layer keeps while verifying: its conv input window and its state
    after every token (qwen/deltanet.py fills them). The states go into memory the trail keeps from
    one verify pass to the next (`slots`). On the full-size model a pass of 4 tokens writes 4 MB of
    states per layer, 72 MB over its 18 linear-attention layers, and fresh memory every pass cost
    more than the rule's arithmetic (bench/bench_speculative.py, a verify pass of 4 tokens with
    trails made anew against a run's own, in decode steps, three runs on Dec 2: 1.21 against 1.12,
    1.40 against 1.21, 1.29 against 1.17). So `settle` copies the state it puts back."""

    def __init__(self):
        self.window = None              # (batch, conv_channels, kernel - 1 + tokens)
        self.states = None              # (tokens, batch, value_heads, dk, dv) fp32: after each token
        self.memory = None              # what states is cut from: the largest pass so far

    def slots(self, shape, device):
        """Room for this pass's states, shape (tokens, batch, heads, dk, dv), fp32 on `device`: the
        last pass's memory when it is large enough, else new."""
        m = self.memory
        if m is None or m.shape[1:] != shape[1:] or len(m) < shape[0] or m.device != torch.device(device):
            self.memory = torch.empty(shape, dtype=torch.float32, device=device)
        self.states = self.memory[:shape[0]]
        return self.states


def new_trails(model):
    """One Trail per linear-attention layer (None for full attention), made once per run."""
    return [Trail() if layer.kind != "full_attention" else None for layer in model.layers]


def cut_attention(layer, length):
    """Cut one attention cache back to its first `length` positions. The view is cut, the buffer
    stays (qwen/attention.py remember then keeps appending into it, with no copy)."""
    room = getattr(layer, "room", None)
    if room is not None and layer.k is room.k and layer.v is room.v:
        room.k, room.v = room.k_buffer[:, :, :length], room.v_buffer[:, :, :length]
        layer.k, layer.v = room.k, room.v
    elif layer.k is not None:
        layer.k, layer.v = layer.k[:, :, :length], layer.v[:, :, :length]


def settle(model, cache, trails, base, m):
    """Make `cache` hold what it would after reading only the first m tokens of the block read at
    positions base, base + 1, ...: attention cut to base + m positions, each linear-attention layer
    given back its state and conv window after token m (kept, not recomputed). Any m from 1 to the
    block's length, in any order: nothing is thrown away until the next block is read."""
    for layer, lc, trail in zip(model.layers, cache.layers, trails):
        if layer.kind == "full_attention":
            cut_attention(lc, base + m)
        else:
            kernel = layer.linear_attn.kernel
            lc.state = trail.states[m - 1].clone()                   # (the trail's memory is reused)
            lc.conv = trail.window[:, :, m:m + kernel - 1].clone()   # the last kernel-1 inputs up to m
    cache.length = base + m


def accepted(drafts, choices):
    """The accept rule: (how many drafts the model agrees with, the model's next token).

    drafts: d_1 .. d_k; choices: the model's greedy tokens y_0 .. y_k after reading p, d_1 .. d_k.
    d_j is kept while it equals y_{j-1}, the model's own choice at that place; at the first
    disagreement (or after all k) the next token is the model's choice there, never the draft."""
    a = 0
    while a < len(drafts) and drafts[a] == choices[a]:
        a += 1
    return a, choices[a]


def accept_sampled(drafts, q, p, generator=None):
    """The accept / reject rule of speculative sampling (Leviathan et al. 2023; Chen et al. 2023):
    (how many drafts are kept, the next token), drawn so that every token comes out distributed as
    plain sampling's, whatever the head guessed.

    drafts: d_1 .. d_k, each drawn from the head's distribution; q (k, vocab): those distributions,
    q[j] the one d_{j+1} was drawn from; p (k + 1, vocab): the model's distributions after reading
    p, d_1 .. d_k (the same temperature, top-k and top-p as q). For each draft in turn: keep it with
    probability min(1, p(d) / q(d)); at the first one not kept, the next token is drawn from
    norm(max(0, p - q)), what the model wants more of than the head offered, and the round ends. All
    kept: the next token is drawn from p[k], the model's own distribution after the last draft."""
    for j, d in enumerate(drafts):
        u = torch.rand((), dtype=torch.float64, generator=generator)            # uniform in [0, 1)
        if u * q[j, d] < p[j, d]:                                             # u < p(d) / q(d): kept
            continue
        residual = (p[j] - q[j]).clamp(min=0)                                 # (vocab,) where p exceeds q
        if not residual.sum() > 0:                                            # p == q to rounding: p itself
            residual = p[j]
        return j, int(torch.multinomial(residual, 1, generator=generator))
    return len(drafts), int(torch.multinomial(p[len(drafts)], 1, generator=generator))   # the bonus token


def probabilities(logits, size, temperature, top_k=0, top_p=1.0):
    """What sampling draws from, over `size` ids: (size,) float64, zero outside the tokens the warpers
    keep (qwen/generate.py distribution: temperature, then top-k, then top-p, in transformers' order)."""
    ids, probs = distribution(logits[:size], temperature, top_k, top_p)
    return torch.zeros(size, dtype=torch.float64).index_put_((ids,), probs.double())


# --------------------------------------------------------------------------------------------
# Speculative decoding
# --------------------------------------------------------------------------------------------

def check_speculative(model, k):
    """Refuse, in one line, what speculative decoding cannot do, before any token is read."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise QwenError("speculative = {k!r}: the number of tokens the MTP head drafts per step must be a whole "
                        "number from 1 to {top} (3 is a good start).",
                        "speculative = {k!r}：MTP 头每步起草的词元数必须是 1 到 {top} 之间的整数（可以从 3 开始）。",
                        k=k, top=MAX_DRAFTS)
    if k > MAX_DRAFTS:
        raise QwenError("speculative = {k}: at most {top} drafted tokens per step; more are almost never all "
                        "accepted and each one costs a head step (3 is a good start).",
                        "speculative = {k}：每步最多起草 {top} 个词元；更多的几乎不会全被接受，而每个都要多算一步 MTP 头"
                        "（可以从 3 开始）。", k=k, top=MAX_DRAFTS)
    if getattr(model, "mtp", None) is None and getattr(model, "mtp_problem", None):
        why = model.mtp_problem
        raise QwenError(why.en.rstrip(".") + ": run without --speculative.", why.zh.rstrip("。") + "：请不加 --speculative 运行。")
    if getattr(model, "mtp", None) is None:
        raise QwenError("Speculative decoding needs the checkpoint's MTP head (mtp.* tensors), and {path} has none "
                        "(transformers' save_pretrained drops them): run without --speculative.",
                        "推测解码需要检查点里的 MTP 头（mtp.* 张量），而 {path} 里没有（transformers 的 save_pretrained "
                        "会丢掉它们）：请不加 --speculative 运行。", path=getattr(model, "path", None) or "the model")


def _forward(model, ids, cache, last=False):
    """model(ids, cache) -> (logits, the main model's hidden states after its final norm for every
    position (1, seq, hidden)). The last layer's output is caught on its way to the final norm (a
    forward hook), so that last=True still computes the logits of the last position only."""
    caught = []
    hook = model.layers[-1].register_forward_hook(lambda module, args, out: caught.append(out))
    try:
        logits = model(ids, cache=cache, last=last)
    finally:
        hook.remove()
    return logits, model.norm(caught[-1])


def _read_prompt(model, ids, cache, keep_at, kept):
    """Prefill as plain generation does (the same calls, so the same first token), also returning
    the main model's hidden states after its final norm for every prompt token (1, prompt, hidden)."""
    hidden = []
    if keep_at is not None and 0 < keep_at < ids.shape[1]:
        hidden.append(_forward(model, ids[:, :keep_at], cache, last=True)[1])
        kept.append(cache.copy())
        ids = ids[:, keep_at:]
    logits, h = _forward(model, ids, cache, last=True)
    return logits[0, -1], torch.cat(hidden + [h], 1)                 # (vocab,), (1, prompt, hidden)


def _verify(model, block, cache, trails=None):
    """The main model reads the block (p and the drafts) in one forward pass, every linear-attention
    layer keeping its trail: (logits (len, vocab), hidden states after the final norm (1, len, hidden),
    the trails).
    trails: a run's own (`new_trails`), whose memory each pass reuses; None: new ones.
    No gradient is recorded (a verify pass only chooses tokens; the trails are written with out=)."""
    trails = new_trails(model) if trails is None else trails
    for lc, trail in zip(cache.layers, trails):
        lc.trail = trail
    try:
        with torch.no_grad():
            logits, hidden = _forward(model, torch.tensor([block]), cache)
    finally:
        for lc in cache.layers:
            lc.trail = None
    return logits[0], hidden, trails                                  # (len, vocab), (1, len, hidden)


@torch.inference_mode()
def speculative_ids(model, ids, k=3, *, max_new_tokens=128, stop=(), cache=None, stats=None, vocab=None,
                    keep_at=None, kept=None, cut=None, drafts=None, temperature=0.0, top_k=0, top_p=1.0, seed=None):
    """Decoding with the MTP head drafting k tokens per step, one token at a time (the stop token
    too, then it ends). Greedy (temperature 0): the same ids as generate_ids(model, ids, ...)
    without it (in fp32; in bf16 a near-tie can flip, module docstring). Sampling (temperature > 0,
    top_k, top_p, seed as plain sampling): the head draws its drafts from its own distribution with
    the same warpers, and `accept_sampled` keeps or replaces them so that the output is distributed
    as plain sampling's (not the same tokens for a seed: the draws are different ones).

    cut: a DraftVocabulary the head guesses from (default: the whole vocabulary).
    drafts (greedy only): a function (tokens so far, the head's drafts) -> the drafts to verify
    instead; the head still runs (the tests and the bench replay a plain run's tokens through it: all
    accepted, or wrong ones: all rejected). stats also receives rounds (verify passes), drafted and
    accepted tokens, and the seconds spent drafting and verifying."""
    check_speculative(model, k)
    cache = model.new_cache() if cache is None else cache
    stop = set(stop)
    ids = torch.as_tensor(ids, dtype=torch.long).reshape(1, -1)                # (1, prompt)
    if ids.shape[1] == 0:
        raise QwenError("The prompt is empty: give at least one token.", "提示词为空：至少要有一个词元。")
    sampling = temperature > 0
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    warpers = dict(temperature=temperature, top_k=top_k, top_p=top_p)
    stats = {} if stats is None else stats
    stats.update(prompt_tokens=ids.shape[1], new_tokens=0, prefill_s=0.0, decode_s=0.0, stopped=False,
                 rounds=0, drafted=0, accepted=0, draft_s=0.0, verify_s=0.0)
    start = time.perf_counter()
    head_at = cache.length                                         # the position of the first prompt token
    trails = new_trails(model)                                     # made once: each pass reuses their memory
    logits, hidden = _read_prompt(model, ids, cache, keep_at, kept)
    size = logits.shape[-1] if vocab is None else vocab           # the ids a token may be
    stats["prefill_s"] = time.perf_counter() - start
    if max_new_tokens <= 0:                                        # (plain generation reads the prompt too)
        return
    start = time.perf_counter()
    p = sample(logits[:size], generator=generator, **warpers)      # as plain generation's first token
    out = [p]
    stats.update(new_tokens=1, stopped=p in stop, decode_s=time.perf_counter() - start)
    yield p
    if p in stop or max_new_tokens == 1:
        return
    todo, todo_hidden = ids[0, 1:].tolist() + [p], hidden          # pairs the head has not read yet
    head_cache = cache.mtp = model.mtp.new_cache()                 # the head's own, kept with the model's
    while True:
        n = min(k, max_new_tokens - len(out) - 1)                  # drafts past the last token are waste
        t0 = time.perf_counter()
        guesses, q = [], []                                        # q: the head's distributions (sampling)

        def guess(g):                                              # g (1, 1, hidden): the head's state
            if not sampling:
                return head_guess(model, g, vocab, cut)
            q.append(probabilities(head_scores(model, g, size, cut), size, **warpers))   # (size,)
            return int(torch.multinomial(q[-1], 1, generator=generator))

        if n > 0:
            g = head_read(model, todo, todo_hidden, head_cache, head_at)[:, -1:]   # (1, 1, hidden)
            head_at += len(todo)
            read = head_cache[0].k.shape[2]
            guesses.append(guess(g))
            for j in range(1, n):                              # the head's own output feeds it
                g = head_read(model, guesses[-1:], g, head_cache, head_at + j - 1, step=j)
                guesses.append(guess(g))
            for lc in head_cache.layers:                           # its guesses came from its own
                cut_attention(lc, read)                            # hidden states: cut back
            if drafts is not None and not sampling:
                guesses = [int(t) for t in drafts(list(out), list(guesses))][:n]
        t1 = time.perf_counter()
        block = [p] + guesses                                      # (n + 1,) read in one pass
        logits, H, trails = _verify(model, block, cache, trails)
        if sampling:                                               # the model's distributions after each
            P = torch.stack([probabilities(row, size, **warpers) for row in logits])   # (n + 1, size)
            a, nxt = accept_sampled(guesses, torch.stack(q) if q else P[:0], P, generator)
        else:
            a, nxt = accepted(guesses, logits[:, :size].argmax(-1).tolist())   # y_0 .. y_n
        stats["draft_s"] += t1 - t0
        stats["verify_s"] += time.perf_counter() - t1
        stats["rounds"] += 1
        stats["drafted"] += len(guesses)
        stats["accepted"] += a
        base = cache.length - len(block)
        new = guesses[:a] + [nxt]
        for m, token in enumerate(new, 1):
            settle(model, cache, trails, base, m)                  # read: p and the tokens before this one
            out.append(token)
            stats.update(new_tokens=len(out), stopped=token in stop, decode_s=time.perf_counter() - start)
            yield token
            if token in stop or len(out) == max_new_tokens:
                return
        p, todo, todo_hidden = nxt, new, H[:, :a + 1]              # the head reads them with the model's hiddens
