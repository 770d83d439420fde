"""Reading ahead: the checkpoint's multi-token-prediction (MTP) head drafts, the model checks.

Why: a decode step reads every weight for one token (memory-bound at batch 1), so reading k + 1 tokens
in one pass costs little more. Qwen3.5 ships a small extra decoder layer, `mtp.*`, trained to guess the
token after the next: it guesses k tokens cheaply, the model reads them all at once, and where the
model's own choice agrees, that token came for free.

The head, for the token at position t (the model has read tokens 0..t and chosen x_{t+1}):
    e = pre_fc_norm_embedding(embed(x_{t+1}))           (1, T, hidden)  the shared embedding table
    h = pre_fc_norm_hidden(hidden_t)                     (1, T, hidden)  after the model's final norm
    x = fc(cat[e, h])                                    (1, T, 2 x hidden) -> (1, T, hidden)
    x = decoder layer (full attention, its own KV cache) (1, T, hidden)
    g = mtp.norm(x); guess for x_{t+2} = argmax(g @ E.T) the shared output layer
The next guess feeds the head its own output g, with its own guess as token.

One round of `speculative_ids`: the head drafts d_1 .. d_k; the model reads [p, d_1 .. d_k] (p: the
token chosen last) in one pass (`verify`); `accepted` (greedy: plain greedy's output, exactly in fp32)
or `accept_sampled` (Leviathan et al. 2023; Chen et al. 2023: plain sampling's distribution) keeps a
prefix of the drafts and adds the model's next token; `settle` gives the caches what plain decoding
would hold. A round yields (1 - a^(k+1)) / (1 - a) tokens at acceptance a.
"""
import numbers
import time

import torch
import torch.nn as nn

from qwen.config import mtp_layers
from qwen.deltanet import Trail
from qwen.generate import Cache, check_sampling, distribution, sample
from qwen.lang import QwenError
from qwen.linear import Linear
from qwen.model import DecoderLayer
from qwen.norm import RMSNorm
from qwen.weights import FLOAT_DTYPES, load, load_weights

MAX_DRAFTS = 8          # drafts per round: at an acceptance of 0.8 the 9th would be used 13% of the time


class MTPHead(nn.Module):
    """(embedding of the next token, the model's hidden state) -> g (batch, seq, hidden) for the output layer."""

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
        """embedded, hidden (B, T, H): embed(next tokens), the model's final-norm hidden; step: which layer."""
        e = self.pre_fc_norm_embedding(embedded)                      # (B, T, H)
        h = self.pre_fc_norm_hidden(hidden.to(embedded.dtype))        # (B, T, H)
        x = self.fc(torch.cat([e, h], -1))                            # (B, T, 2H) -> (B, T, H): embedding first
        i = step % len(self.layers)
        x = self.layers[i](x, cos, sin, None if cache is None else cache[i])
        return self.norm(x)                                           # (B, T, H)


def load_head(model, W=None):
    """model.mtp from the checkpoint's `mtp.*` tensors (W: model.path's), in the model's dtype and device.
    Without mtp.* (transformers' save_pretrained drops them) model.mtp stays None; a partial or mis-shaped
    set leaves it None too, with the reason in model.mtp_problem: the text model decodes as usual."""
    W = load_weights(model.path) if W is None else W
    model.mtp_problem = head_problem(model.cfg, W)
    if model.mtp_problem is None and W.names_under("mtp."):
        with torch.device("meta"):                                    # shapes only, filled by load()
            head = MTPHead(model.cfg, mtp_layers(model.cfg))
        model.mtp = load(head, W, "mtp.").to(model.norm.weight.device, model.norm.weight.dtype)
    return model.mtp


def head_problem(cfg, W):
    """Why W's `mtp.*` tensors cannot make the head, a QwenError (returned, not raised), or None."""
    if not (names := W.names_under("mtp.")):
        return None
    with torch.device("meta"):
        wanted = {"mtp." + n: list(t.shape) for n, t in MTPHead(cfg, mtp_layers(cfg)).state_dict().items()}
    for key, shape in wanted.items():
        if key not in W:
            why = ("the MTP head's tensor {key} is missing (the head needs shape {want}, the file has no such tensor)",
                   "缺少 MTP 头的张量 {key}（头需要形状 {want}，文件里没有这个张量）")
        elif list(W.shape(key)) != shape:
            why = ("the MTP head's tensor {key} has shape {got}, the head needs {want} (from config.json)",
                   "MTP 头的张量 {key} 的形状是 {got}，头需要 {want}（来自 config.json）")
        elif W.info(key).dtype not in FLOAT_DTYPES:
            why = ("the MTP head's tensor {key} is stored as {dtype}, but weights are floating-point numbers",
                   "MTP 头的张量 {key} 存成了 {dtype}，但权重应是浮点数")
        else:
            continue
        found = key in W
        return QwenError("{file}: " + why[0] + ", so speculative decoding is unavailable; plain decoding works.", "{file}："
                         + why[1] + "，所以推测解码不可用；普通解码照常可用。", key=key, want=shape, got=found and
                         list(W.shape(key)), file=W.info(key if found else names[0]).file, dtype=found and W.info(key).dtype)
    if extra := [n for n in names if n not in wanted]:
        return QwenError("{file}: {key} is not a tensor of the MTP head config.json describes ({n} layer(s)), so "
                         "speculative decoding is unavailable; plain decoding works.", "{file}：{key} 不是 config.json 所描述"
                         "的 MTP 头（{n} 层）的张量，所以推测解码不可用；普通解码照常可用。", file=W.info(extra[0]).file,
                         key=extra[0], n=mtp_layers(cfg))


def check_speculative(model, k):
    """Refuse, in one line, what speculative decoding cannot do, before any token is read (loads the head)."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 1 <= k <= MAX_DRAFTS:
        raise QwenError("speculative = {k!r}: the number of tokens the MTP head drafts per step must be a whole number"
                        " from 1 to {top} (3 is a good start; more are almost never all accepted).", "speculative = {k!r}："
                        "MTP 头每步起草的词元数必须是 1 到 {top} 之间的整数（可以从 3 开始；更多的几乎不会全被接受）。", k=k, top=MAX_DRAFTS)
    if model.mtp is None and model.path is not None:
        load_head(model)
    if model.mtp is None:
        why = model.mtp_problem or QwenError("Speculative decoding needs the checkpoint's MTP head (mtp.* tensors), and "
            "{path} has none (transformers' save_pretrained drops them).", "推测解码需要检查点里的 MTP 头（mtp.* 张量），而 "
            "{path} 里没有（transformers 的 save_pretrained 会丢掉它们）。", path=model.path or "the model")
        raise QwenError(why.en.rstrip(".") + ": run without --speculative.", why.zh.rstrip("。") + "：请不加 --speculative 运行。")


def head_read(model, tokens, hidden, cache, start, step=0):
    """The head reads pairs (tokens[j], hidden[:, j]) at positions start, ...: its states (1, len(tokens), hidden)."""
    device = model.embed_tokens.weight.device
    ids = torch.as_tensor(tokens, device=device).reshape(1, -1)      # (1, T)
    cos, sin = model.rotary(torch.arange(start, start + ids.shape[1], device=device))
    return model.mtp(model.embed_tokens(ids), hidden, cos, sin, cache, step=step)


def head_scores(model, g, out, drafted):
    """The head's scores (vocab,) from g (1, 1, hidden), by the shared output layer (out, drafted: unused)."""
    return model.logits(g[0, -1])


def forward(model, ids, cache, last=False):
    """model(ids, cache) -> (logits, hidden states after the final norm (1, seq, hidden)): a hook catches the
    last layer's output on its way to the norm, so last=True still works."""
    caught = []
    hook = model.layers[-1].register_forward_hook(lambda module, args, out: caught.append(out))
    try:
        logits = model(ids, cache=cache, last=last)
    finally:
        hook.remove()
    return logits, model.norm(caught[-1])


def new_trails(model):
    """One Trail per linear-attention layer (None for full attention), made once per run."""
    return [Trail() if layer.kind != "full_attention" else None for layer in model.layers]


@torch.no_grad()
def verify(model, block, cache, trails=None):
    """The model reads the block (p, drafts) in one pass, each DeltaNet layer keeping its trail: (logits (len,
    vocab), hidden states (1, len, hidden), the trails)."""
    trails = new_trails(model) if trails is None else trails
    for lc, trail in zip(cache.layers, trails):
        lc.trail = trail
    try:
        logits, hidden = forward(model, torch.tensor([block]), cache)
    finally:
        for lc in cache.layers:
            lc.trail = None
    return logits[0], hidden, trails


def settle(model, cache, trails, base, m):
    """`cache` as after only the first m tokens of the block read at position base: attention by position, each
    DeltaNet layer its state and conv window after token m (copies: the next pass writes the trail again)."""
    for layer, lc, trail in zip(model.layers, cache.layers, trails):
        lc.length = base + m
        if trail is not None:
            lc.state = trail.states[m - 1].clone()                   # (B, heads, dk, dv)
            lc.conv = trail.window[:, :, m:m + layer.linear_attn.kernel - 1].clone()
    cache.length = base + m


def accepted(drafts, choices):
    """(how many drafts the model agrees with, the model's next token). choices: its greedy tokens
    y_0 .. y_k after reading p, d_1 .. d_k; d_j is kept while it equals y_{j-1}."""
    a = 0
    while a < len(drafts) and drafts[a] == choices[a]:
        a += 1
    return a, choices[a]


def accept_sampled(drafts, q, p, generator=None):
    """(how many drafts are kept, the next token), each token distributed as plain sampling's. q (k, vocab):
    the head's distributions the drafts were drawn from; p (k + 1, vocab): the model's after reading p,
    d_1 .. d_k. Keep d with probability min(1, p(d) / q(d)); at the first one not kept, draw from
    norm(max(0, p - q)); all kept: draw the next token from p[k]."""
    for j, d in enumerate(drafts):
        u = torch.rand((), dtype=torch.float64, generator=generator)          # uniform in [0, 1)
        if u * q[j, d] < p[j, d]:                                             # u < p(d) / q(d): kept
            continue
        residual = (p[j] - q[j]).clamp(min=0)                                 # (vocab,) where p exceeds q
        residual = residual if residual.sum() > 0 else p[j]                   # p == q to rounding: p itself
        return j, int(torch.multinomial(residual, 1, generator=generator))
    return len(drafts), int(torch.multinomial(p[len(drafts)], 1, generator=generator))


def probabilities(logits, size, temperature, top_k=0, top_p=1.0):
    """What sampling draws from, over `size` ids: (size,) float64, zero outside what the warpers keep."""
    ids, probs = distribution(logits[:size], temperature, top_k, top_p)
    return torch.zeros(size, dtype=torch.float64).index_put_((ids,), probs.double())


@torch.inference_mode()
def speculative_ids(model, ids, k=3, *, max_new_tokens=128, stop=(), cache=None, stats=None, vocab=None,
                    temperature=0.0, top_k=0, top_p=1.0, seed=None, guess=head_scores):
    """generate_ids with the MTP head drafting k tokens per round: the same ids greedy (fp32), the same
    distribution sampled. guess(model, g, out, drafted) -> the head's scores (engine/speculative.py: a
    cut vocabulary, replayed drafts). stats: generate_ids', and rounds, drafted, accepted, draft_s, verify_s."""
    check_speculative(model, k)
    check_sampling(temperature, top_k, top_p, prompt=ids)
    cache = model.new_cache() if cache is None else cache
    warp, sampling = dict(temperature=temperature, top_k=top_k, top_p=top_p), temperature > 0
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    ids = torch.as_tensor(ids, dtype=torch.long).reshape(1, -1)                # (1, prompt)
    stats = {} if stats is None else stats
    stats.update(prompt_tokens=ids.shape[1], rounds=0, drafted=0, accepted=0, draft_s=0.0, verify_s=0.0)
    start, head_at, trails = time.perf_counter(), cache.length, new_trails(model)
    logits, hidden = forward(model, ids, cache, last=True)                     # prefill
    size = vocab or logits.shape[-1]
    out = [sample(logits[0, -1, :size], generator=generator, **warp)]
    stats.update(prefill_s=time.perf_counter() - start, decode_s=0.0, new_tokens=1, stopped=out[0] in stop)
    start = time.perf_counter()
    yield from out[:max_new_tokens]
    p, todo, todo_hidden, head = out[0], ids[0, 1:].tolist() + out, hidden, model.mtp.new_cache()
    cache.mtp = head                                                           # (kept with the model's)
    while p not in stop and len(out) < max_new_tokens:
        t0, n, drafts, q = time.perf_counter(), min(k, max_new_tokens - len(out) - 1), [], []
        if n:
            g = head_read(model, todo, todo_hidden, head, head_at)[:, -1:]     # (1, 1, hidden)
            read, head_at = head[0].length, head_at + len(todo)
            for j in range(n):
                if j:                                                          # its own output fed back
                    g = head_read(model, drafts[-1:], g, head, head_at + j - 1, step=j)
                scores = guess(model, g, out, drafts)[:size]
                q.append(probabilities(scores, size, **warp) if sampling else None)
                drafts.append(int(torch.multinomial(q[-1], 1, generator=generator)) if sampling else int(scores.argmax()))
            for lc in head.layers:
                lc.length = read                     # its guesses came from its own hidden states: back
        t1 = time.perf_counter()
        logits, H, trails = verify(model, [p] + drafts, cache, trails)       # (n + 1, vocab)
        if sampling:
            P = torch.stack([probabilities(row, size, **warp) for row in logits])   # (n + 1, size)
            a, nxt = accept_sampled(drafts, torch.stack(q) if q else P[:0], P, generator)
        else:
            a, nxt = accepted(drafts, logits[:, :size].argmax(-1).tolist())
        stats.update(rounds=stats["rounds"] + 1, drafted=stats["drafted"] + n, accepted=stats["accepted"] + a,
                     draft_s=stats["draft_s"] + t1 - t0, verify_s=stats["verify_s"] + time.perf_counter() - t1)
        base, new = cache.length - n - 1, drafts[:a] + [nxt]
        for m, token in enumerate(new, 1):
            settle(model, cache, trails, base, m)                              # read: p and the ones before
            out.append(token)
            stats.update(new_tokens=len(out), stopped=token in stop, decode_s=time.perf_counter() - start)
            yield token
            if token in stop or len(out) == max_new_tokens:
                return
        p, todo, todo_hidden = nxt, new, H[:, :a + 1]          # the head reads them with the model's hiddens
