"""Generation: a cache, sampling, stop tokens, the chat template, and text streamed as it comes.

A language model predicts one token at a time. Running the whole sequence again for every new
token would cost O(n) work per token for every layer; the cache keeps, per layer, exactly what
that layer needs to continue:

    full attention (6 of 24 layers in 0.8B)   k, v: (batch, kv_heads, seq, head_dim), grows by one
                                              position per token
    linear attention (18 of 24)                conv: the last kernel-1 conv inputs (a 3-token window)
                                              state: (batch, heads, 128, 128) fp32, fixed size

So the prompt is read once (prefill: many tokens at a time, the chunked delta rule), then each
new token is one small step (decode: the recurrent rule, one key and value more per attention
layer). The modules only read and write the attributes of a `LayerCache` (qwen/cache.py).

Choosing the next token from the logits: greedy (temperature 0) takes the largest; sampling
divides the logits by a temperature, optionally keeps only the top-k tokens (and those tied with
the k-th), then only the smallest set of tokens whose probabilities sum to at least top_p (the
token that crosses top_p is kept), and draws one with a seeded generator, so a run can be
repeated exactly. These are transformers' warpers, in their order; top-p sums in float64.

Text comes out as bytes: one token may hold half of a Chinese character. `TextStream` keeps the
bytes of an unfinished character until the next token completes it, so streamed text never
shows a replacement character that the whole reply would not have.

The chat template (`chat_template.jinja`, next to the weights) is a jinja2 program that turns a
list of messages into the prompt text the model was trained on; we run it as transformers does
(a sandboxed jinja2 environment with trim_blocks and lstrip_blocks).
"""
import codecs
import json
import math
import numbers
import time
from pathlib import Path

import torch

from qwen.cache import Cache, LayerCache  # noqa: F401  (re-exported: qwen.generate.Cache, the learner's import path)
from qwen.lang import QwenError

STOP_TOKENS = ("<|im_end|>", "<|endoftext|>")
TEMPLATE_NAME = "chat_template.jinja"


def kv_cache_bytes(cfg, tokens, itemsize, layers=None):
    """Bytes a key/value cache of `tokens` positions needs in `layers` layers (default: all of them)."""
    layers = cfg.num_hidden_layers if layers is None else layers
    return layers * 2 * cfg.num_key_value_heads * cfg.head_dim * tokens * itemsize


# --------------------------------------------------------------------------------------------
# Choosing the next token
# --------------------------------------------------------------------------------------------

def check_sampling(temperature=0.0, top_k=0, top_p=1.0):
    """Refuse settings that mean nothing, in one line, before any token is read: a negative top_k or
    a top_p of 1.5 used to be ignored without a word, and a nan temperature failed inside the draw.

    temperature: a finite number >= 0; 0 picks the most likely token (greedy), without drawing.
    top_k: a whole number >= 0; 0 keeps every token. top_p: a number from 0 to 1; 1 keeps every
    token, 0 only the most likely one(s)."""
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real) or not (
            math.isfinite(temperature) and temperature >= 0):
        raise QwenError("temperature must be a number >= 0 (0 always picks the most likely token; Qwen suggests "
                        "0.7), got {v!r}.",
                        "temperature 必须是 >= 0 的数（0 表示总是选最可能的词元；Qwen 建议 0.7），实际是 {v!r}。",
                        v=temperature)
    if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 0:
        raise QwenError("top_k must be a whole number >= 0 (0 keeps every token; Qwen suggests 20), got {v!r}.",
                        "top_k 必须是 >= 0 的整数（0 表示保留所有词元；Qwen 建议 20），实际是 {v!r}。", v=top_k)
    if isinstance(top_p, bool) or not isinstance(top_p, numbers.Real) or not 0 <= top_p <= 1:
        raise QwenError("top_p must be a number from 0 to 1 (1 keeps every token, 0 only the most likely one; "
                        "Qwen suggests 0.8), got {v!r}.",
                        "top_p 必须是 0 到 1 之间的数（1 表示保留所有词元，0 只保留最可能的那个；Qwen 建议 0.8），"
                        "实际是 {v!r}。", v=top_p)


def top_k_filter(logits, k):
    """Keep the k largest logits and every logit tied with the k-th (as transformers' top-k does:
    bf16 logits tie often); the rest become -inf. k = 0 keeps all of them."""
    check_sampling(top_k=k)
    if k == 0 or k >= logits.shape[-1]:
        return logits
    kth = logits.topk(k, dim=-1).values[..., -1:]                          # (..., 1)
    return logits.masked_fill(logits < kth, float("-inf"))


TOP_P_FIRST = 256          # top-p looks among the 256 most likely tokens first,
TOP_P_WINDOW = 4096        # ... else narrows the cut down to at most this many tokens, then sorts those


def top_p_filter(logits, p):
    """Keep the smallest set of most likely tokens whose probabilities sum to at least p.

    The rule, precisely: sorted by probability, a token is kept when the mass of the tokens before
    it is below p. So the token that crosses p is kept; when the most likely tokens sum to exactly
    p, the next one is not (the mass before it is p, not below it); the most likely token is always
    kept (p = 0 keeps it alone). Equal logits at the cut are taken in vocabulary order, as many as
    the rule needs: the set's size never depends on the order, only which of the tied tokens are
    in it (transformers' TopPLogitsWarper keeps the same number, in its sort's order; exercise 232
    accepts any of them).

    The sums are float64: an fp32 running sum over 248,320 probabilities rounds away more than a
    flat tail's tokens hold (bench/bench_sampling.py: on 300 seeded vectors the fp32 cut differed
    from a float64 one in 81, by up to 2,333 tokens, and in 46 kept less than p). Each row costs a
    top-k of 256 and a few passes, not a sort of the whole vocabulary (`_top_p_cut`)."""
    check_sampling(top_p=p)
    if p == 1:
        return logits
    rows = logits.reshape(-1, logits.shape[-1])                            # (rows, vocab)
    keep = torch.stack([_top_p_keep(row, p) for row in rows])              # (rows, vocab) bool
    return logits.masked_fill(~keep.reshape(logits.shape), float("-inf"))


def _top_p_keep(row, p):
    """Which tokens of one row (vocab,) top-p keeps: every logit above the cut, and of those equal
    to it (a tie), the first ones in vocabulary order while the mass before each is below p."""
    cut = _top_p_cut(row, p)                                               # the crossing token's logit
    if not torch.isfinite(cut):                                            # all -inf, or an inf logit
        return row >= cut
    x = row.double()
    probs = (x - x.max()).exp_()
    probs /= probs.sum()                                                   # (vocab,) float64 softmax
    above, tied = row > cut, row == cut
    n_tied = int(tied.sum())
    before = probs[above].sum() + probs[tied][0] * torch.arange(n_tied, dtype=torch.float64)  # (n_tied,)
    need = max(1, int((before < p).sum()))                                 # p = 0: the most likely alone
    return above | (tied & (tied.cumsum(-1) <= need))


def _top_p_cut(row, p):
    """The lowest logit top-p keeps in one row (vocab,): the logit of the token that crosses p.

    1. The crossing token is usually among the most likely few (a trained model's top-p set is a
       few dozen tokens): sum the probabilities of the 256 largest logits, in order.
    2. Else (a flat distribution: random weights keep thousands of tokens) narrow it down without
       sorting the vocabulary, 16 bits of the logit at a time (`_sortable_bits`): the probability
       mass of each of the 65,536 values of the top 16 bits is one bincount; summed from the top,
       they say which value holds the crossing token. Keep only the tokens with that value, and go
       on with the next 16 bits, until a few thousand tokens are left: sort those. (A radix
       select: for fp32 logits, two passes of counting instead of a sort.)"""
    first = row.topk(min(TOP_P_FIRST, len(row))).values.double()           # (256,) largest first
    if not torch.isfinite(first[0]):                                       # all -inf, or an inf logit
        return first[0]
    probs = row.to(torch.float64, copy=True).sub_(first[0]).exp_()          # (vocab,) softmax, before dividing
    total = probs.sum()
    mass = ((first - first[0]).exp() / total).cumsum(0)                    # mass of the tokens up to each
    j = int(torch.searchsorted(mass, p))                                   # the first whose sum reaches p
    if j < len(first):
        return first[j]
    probs /= total                                                         # (vocab,)
    keys = _sortable_bits(row if row.dtype == torch.float64 else row.float())   # (vocab,) int32 (bf16: exact)
    where = None                                                           # the window's positions in row (None: all)
    above = 0.0                                                            # mass of the tokens above the window
    for shift in range(keys.element_size() * 8 - 16, -1, -16):             # 16, 0 (float64: 48, 32, 16, 0)
        if len(keys) <= TOP_P_WINDOW:
            break
        digit = (keys >> shift).bitwise_and_(0xFFFF)                       # (n,) 16 bits: 0..65535
        per_digit = torch.bincount(digit, weights=probs, minlength=1 << 16).flip(0)   # (65536,) top value first
        reached = above + per_digit.cumsum(0)                              # mass at or above each value
        j = int(torch.searchsorted(reached, p))                            # the value that holds the crossing
        j = min(j, int(per_digit.nonzero()[-1]))                           # (rounding: stay where tokens are)
        above = reached[j - 1] if j else above
        inside = (digit == 0xFFFF - j).nonzero().squeeze(1)                # (m,) the tokens with that value
        probs, keys, where = probs[inside], keys[inside], inside if where is None else where[inside]
    x = row.double() if where is None else row[where].double()             # (m,) the window's logits
    if len(x) > TOP_P_WINDOW:                                              # all bits read: every one tied
        return x[0]
    x, order = x.sort(descending=True)
    mass = above + probs[order].cumsum(0)
    j = min(int(torch.searchsorted(mass, p)), len(x) - 1)                  # (rounding: keep the whole window)
    return x[j]


def _sortable_bits(x):
    """float32 or float64 (n,) -> int32 or int64 (n,) whose bits, read as an unsigned number, sort
    as the floats do (then 16 bits at a time can be counted from the top, as digits).

    A positive float's bits grow with it (exponent first, then mantissa): set the sign bit, so they
    come after the negatives. A negative float's bits grow as it shrinks: flip them all."""
    kind = torch.int64 if x.dtype == torch.float64 else torch.int32
    bits = x.view(kind)
    flip = (bits >> (bits.element_size() * 8 - 1)).bitwise_or_(torch.iinfo(kind).min)  # all ones, or the sign
    return flip.bitwise_xor_(bits)                                         # negative: ~bits; else sign bit set


def distribution(logits, temperature=1.0, top_k=0, top_p=1.0):
    """What sampling draws from: (ids, probs), the tokens that can be drawn and their probabilities.

    Logits (vocab,) are divided by the temperature, then top-k, then top-p, in the order of
    transformers' warpers (TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper), and the
    softmax is taken over what is left. With top-k, top-p looks only at the k tokens kept, not at
    the whole 248k vocabulary. Temperature 0: the most likely token, with probability 1."""
    check_sampling(temperature, top_k, top_p)
    logits = logits.cpu()
    z = logits.to(torch.promote_types(logits.dtype, torch.float32))       # (vocab,) bf16 -> fp32, exactly
    if temperature == 0 or not torch.isfinite(z.max() / temperature):     # so small a temperature that z
        return z.argmax(-1, keepdim=True), torch.ones(1, dtype=z.dtype)   # overflows: greedy, as its limit
    z = z / temperature
    ids = None                                                             # None: every token, in order
    if 0 < top_k < z.shape[-1]:
        top, ids = z.topk(top_k)                                           # (k,) largest first
        if int(torch.count_nonzero(z >= top[-1])) > top_k:                 # logits tied with the k-th left out
            ids = (z >= top[-1]).nonzero().squeeze(1)                      # (more than k,): keep them too
        z = z[ids]
    if top_p < 1:
        kept = (top_p_filter(z, top_p) > float("-inf")).nonzero().squeeze(1)
        ids, z = kept if ids is None else ids[kept], z[kept]
    return torch.arange(len(z)) if ids is None else ids, z.softmax(-1)


def sample(logits, temperature=0.0, top_k=0, top_p=1.0, generator=None):
    """One token id from logits (vocab,): greedy (the largest logit, no draw) when temperature is 0,
    else drawn from `distribution` with a seeded generator, so a run can be repeated exactly."""
    check_sampling(temperature, top_k, top_p)
    if temperature == 0:
        return int(logits.argmax(dim=-1))
    ids, probs = distribution(logits, temperature, top_k, top_p)
    return int(ids[torch.multinomial(probs, 1, generator=generator)])


def stop_ids(tok):
    """The ids that end a reply: <|im_end|> (end of a chat turn) and <|endoftext|>."""
    return {tok.special[t] for t in STOP_TOKENS if t in tok.special}


# --------------------------------------------------------------------------------------------
# Text out, as it comes
# --------------------------------------------------------------------------------------------

class TextStream:
    """Token ids in, text out: bytes of a character split over tokens wait for the rest of it."""

    def __init__(self, tok):
        self.tok = tok
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id):
        """The text that this token completes ('' while a character is still unfinished)."""
        return self._utf8.decode(self.tok.token_bytes(int(token_id)))

    def flush(self):
        """Whatever is left at the end (an unfinished character becomes U+FFFD)."""
        return self._utf8.decode(b"", final=True)


# --------------------------------------------------------------------------------------------
# The chat template
# --------------------------------------------------------------------------------------------

class ChatTemplate:
    """The checkpoint's chat template: messages -> prompt text.

    `render(messages, add_generation_prompt=True, enable_thinking=False)`. Qwen3.5's template
    opens the reply with `<think>\\n` (the model reasons first, then closes `</think>`), or, with
    enable_thinking=False, with an empty block `<think>\\n\\n</think>\\n\\n` so that it answers at
    once. Reasoning in earlier assistant turns is dropped from the history."""

    def __init__(self, source, origin="chat template"):
        from jinja2 import TemplateError
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        self.source = source
        self.origin = origin
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, **kw: json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent)
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: time.strftime(fmt)
        try:
            self._template = env.from_string(source)
        except TemplateError as e:
            raise QwenError("{file} is not a valid jinja2 template: {why}. Download it again.",
                            "{file} 不是有效的 jinja2 模板：{why}。请重新下载。", file=origin, why=e) from None

    @classmethod
    def load(cls, folder):
        """From a model folder: chat_template.jinja, else the chat_template key of tokenizer_config.json."""
        folder = Path(folder)
        file = folder / TEMPLATE_NAME
        if file.is_file():
            return cls(file.read_text(encoding="utf-8"), str(file))
        config = folder / "tokenizer_config.json"
        if config.is_file():
            text = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
            if isinstance(text, str):
                return cls(text, str(config))
        raise QwenError("{folder} has no chat_template.jinja, so the chat format is unknown. Download the "
                        "model again (python main.py download), or pass chat=False for plain text.",
                        "{folder} 里没有 chat_template.jinja，不知道对话格式。请重新下载模型"
                        "（python main.py download），或用 chat=False 直接续写文本。", folder=folder)

    def render(self, messages, add_generation_prompt=True, **options):
        from jinja2 import TemplateError

        for m in messages:
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise QwenError("Each chat message must be a dict with 'role' and 'content', got {m!r}.",
                                "每条对话消息都必须是带 'role' 和 'content' 的 dict，实际是 {m!r}。", m=m)
        try:
            return self._template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                         **options)
        except TemplateError as e:
            raise QwenError("The chat template ({file}) refused the messages: {why}",
                            "对话模板（{file}）拒绝了这些消息：{why}", file=self.origin, why=e) from None


def _raise(message):
    from jinja2 import TemplateError
    raise TemplateError(message)


# --------------------------------------------------------------------------------------------
# The generation loop
# --------------------------------------------------------------------------------------------

@torch.inference_mode()
def generate_ids(model, ids, *, max_new_tokens=128, temperature=0.0, top_k=0, top_p=1.0, seed=None,
                 stop=(), cache=None, stats=None, vocab=None, keep_at=None, kept=None, pixel_values=None,
                 grid_thw=None, speculative=None):
    """Prompt ids in, new token ids out, one at a time (the stop token is yielded too, then it ends).

    The prompt is read in one call (prefill); every new token is one more call of length 1 (decode).
    Only the last position's logits are computed: the output layer (vocab x hidden) is the largest
    matmul of a decode step. `stats`, a dict, receives token counts and seconds. `vocab`: only ids
    below it are picked (generate passes the tokenizer's size: Qwen3.5's output layer has 248,320
    rows for 248,077 ids, and the rows past them are padding that no text maps to; random weights,
    the tiny checkpoint's included, do pick them, and the reply could not be decoded).
    keep_at (0 < keep_at < prompt length): the prompt is read in two parts, and the list `kept`
    receives a copy of the cache between them (Cache.copy), a point to continue from later.
    pixel_values, grid_thw: the images whose pad tokens the prompt holds (already expanded, one per
    merged token: image_prompt_ids); they are read with the prompt, and decoding goes on from the
    cache as for text (its rope delta places the new tokens after the image).
    speculative=k: the checkpoint's MTP head drafts k tokens per step, the model checks them in one
    pass (qwen/mtp.py, chapter 12), text prompts only: greedy gives the same ids (in fp32; in bf16 a
    near-tie can flip), sampling the same distribution (the accept / reject rule), in fewer passes."""
    check_sampling(temperature, top_k, top_p)                                  # before the prompt is read
    if speculative is not None and grid_thw is not None:
        raise QwenError("Speculative decoding reads text prompts only: leave out --speculative for a prompt with "
                        "an image.", "推测解码只读纯文本提示词：提示词里有图像时请去掉 --speculative。")
    if speculative is not None:
        from qwen.mtp import speculative_ids
        yield from speculative_ids(model, ids, speculative, max_new_tokens=max_new_tokens, stop=stop, cache=cache,
                                   stats=stats, vocab=vocab, keep_at=keep_at, kept=kept, temperature=temperature,
                                   top_k=top_k, top_p=top_p, seed=seed)
        return
    cache = model.new_cache() if cache is None else cache
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    stop = set(stop)
    ids = torch.as_tensor(ids, dtype=torch.long).reshape(1, -1)                # (1, prompt)
    if ids.shape[1] == 0:
        raise QwenError("The prompt is empty: give at least one token.", "提示词为空：至少要有一个词元。")
    stats = {} if stats is None else stats
    stats.update(prompt_tokens=ids.shape[1], new_tokens=0, prefill_s=0.0, decode_s=0.0, stopped=False)
    start = time.perf_counter()
    images = [(pixel_values, grid_thw)]
    if keep_at is not None and 0 < keep_at < ids.shape[1]:
        images = [(None, None)] * 2 if grid_thw is None else split_images(model.cfg, ids[0].tolist(), keep_at,
                                                                          pixel_values, grid_thw)
    if len(images) == 2:                                                   # None: keep_at cuts an image
        model(ids[:, :keep_at], cache=cache, last=True, **_image_args(*images[0]))
        kept.append(cache.copy())
        ids = ids[:, keep_at:]                                             # (1, the rest)
    logits = model(ids, cache=cache, last=True, **_image_args(*images[-1]))[0, -1, :vocab]   # (vocab,)
    stats["prefill_s"] = time.perf_counter() - start
    start = time.perf_counter()
    for n in range(max_new_tokens):
        token = sample(logits, temperature, top_k, top_p, generator)
        stats["new_tokens"] = n + 1
        stats["decode_s"] = time.perf_counter() - start
        stats["stopped"] = token in stop
        yield token
        if token in stop:
            return
        if n + 1 < max_new_tokens:
            logits = model(torch.tensor([[token]]), cache=cache, last=True)[0, -1, :vocab]
            stats["decode_s"] = time.perf_counter() - start


def _image_args(pixel_values, grid_thw):
    return {} if grid_thw is None else {"pixel_values": pixel_values, "grid_thw": grid_thw}


def split_images(cfg, ids, at, pixel_values, grid_thw):
    """The images of a prompt `ids` read in two parts, ids[:at] and ids[at:]: [(pixels, grid) of the
    first part's images, (pixels, grid) of the second's], (None, None) for a part without one.
    [(pixel_values, grid_thw)] (do not split) when `at` falls inside an image's pad tokens."""
    if grid_thw is None or pixel_values is None:
        return [(None, None), (pixel_values, grid_thw)]
    image_id, merge = cfg.image_tokens()
    grid_thw = torch.as_tensor(grid_thw).reshape(-1, 3)
    tokens = (grid_thw.prod(-1) // merge ** 2).cumsum(0).tolist()              # pad tokens up to each image
    before = sum(1 for i in ids[:at] if i == image_id)
    if before and before not in tokens:
        return [(pixel_values, grid_thw)]
    k = tokens.index(before) + 1 if before else 0                              # images in the first part
    patches = int(grid_thw[:k].prod(-1).sum())
    part = lambda pv, g: (pv, g) if len(g) else (None, None)                   # noqa: E731
    return [part(pixel_values[:patches], grid_thw[:k]), part(pixel_values[patches:], grid_thw[k:])]


def image_prompt_ids(ids, cfg, grid_thw):
    """The ids with each <|image_pad|> the template wrote repeated to its image's token count,
    t * h * w / merge^2 (grid_thw (images, 3): 448 x 448 is a 1 x 28 x 28 grid, 196 tokens), as
    transformers' processor expands them. The number of pads must equal the number of images."""
    grids = [] if grid_thw is None else torch.as_tensor(grid_thw).reshape(-1, 3).tolist()
    if not grids:
        return list(ids)
    image_id, merge = cfg.image_tokens()
    pads = sum(1 for i in ids if i == image_id)
    if pads != len(grids):
        raise QwenError("The prompt has {p} image slots (<|vision_start|><|image_pad|><|vision_end|> from the chat "
                        "template) for {n} image(s): put one {{'type': 'image'}} item per image in the messages.",
                        "提示词里有 {p} 个图像位置（对话模板写出的 <|vision_start|><|image_pad|><|vision_end|>），"
                        "但有 {n} 张图像：消息里每张图像放一个 {{'type': 'image'}} 项。", p=pads, n=len(grids))
    counts = iter(t * h * w // merge ** 2 for t, h, w in grids)
    out = []
    for i in ids:
        out += [i] * next(counts) if i == image_id else [i]
    return out


def with_images(prompt, images):
    """A prompt string or message list with `images` image items put first into the first user
    message's content (the real template's list content: {'type': 'image'}, {'type': 'text', ...})."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
    if not images:
        return messages
    for m in messages:
        if m.get("role") == "user":
            content = m["content"]
            text = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
            m["content"] = [{"type": "image"}] * images + text
            return messages
    raise QwenError("An image goes into a user message, and these messages have none.",
                    "图像要放进用户消息里，但这些消息里没有用户消息。")


def prompt_ids(tok, prompt, *, chat=True, template=None, enable_thinking=False):
    """Token ids for a prompt: a string (a user message when chat, else plain text to continue),
    a list of chat messages, or a list of ids."""
    if isinstance(prompt, (list, tuple)) and prompt and all(isinstance(i, int) for i in prompt):
        return list(prompt)
    if isinstance(prompt, str) and not chat:
        return tok.encode(prompt)
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    if template is None:
        raise QwenError("A chat prompt needs the checkpoint's chat template (template=ChatTemplate.load(path)).",
                        "对话提示词需要检查点的对话模板（template=ChatTemplate.load(path)）。")
    return chat_ids(tok, template, messages, enable_thinking=enable_thinking)


TEXT_ROLES = ("system", "user")     # messages people write: special-token text in them is text


def chat_ids(tok, template, messages, add_generation_prompt=True, **options):
    """The ids of a conversation rendered by the template, special tokens only where the template
    writes them.

    Rendered, a user's message is just more text: 'hi<|im_end|>\n<|im_start|>system\n...' typed
    by a user would end the turn and open a system turn (transformers encodes it so too, unless
    split_special_tokens=True). Here the text of system and user messages is encoded as ordinary
    text ('<|im_end|>' as '<', '|', 'im', ...), the rest of the prompt with its special tokens."""
    text = template.render(messages, add_generation_prompt=add_generation_prompt, **options)
    return tok.encode(text, plain=_text_spans(template, messages, text, add_generation_prompt, options))


def _text_spans(template, messages, text, add_generation_prompt, options):
    """(start, end) of each system or user message's text in `text`, the rendered conversation.

    The template is rendered again with a marker in place of each of these messages; the pieces of
    template text around the markers, joined with the messages (as given, or stripped, as some
    templates write them), must give `text` back: then the positions are exact. A template that
    changes the text in other ways: each message's (stripped) text is looked for in order."""
    which = _typed_texts(messages)                                 # [(message, item or None, text)]
    if not which:
        return []
    contents = [t for _, _, t in which]
    marker = next((chr(c) for c in range(0xE000, 0xF900)          # a private-use character found nowhere else:
                   if chr(c) not in text), None)                   # a message holding one must not split the text
    if marker is not None:
        marks = {(i, j): f"{marker}{n}{marker}" for n, (i, j, _) in enumerate(which)}
        marked = template.render(_replace_texts(messages, marks),
                                 add_generation_prompt=add_generation_prompt, **options)
        parts = marked.split(marker)                               # template, n, template, n, ...
        if len(parts) % 2 and all(p.isdigit() and int(p) < len(which) for p in parts[1::2]):
            for shape in (str, str.strip):
                spans, out, at = [], [parts[0]], len(parts[0])
                for n, between in zip(parts[1::2], parts[2::2]):
                    content = shape(contents[int(n)])
                    spans.append((at, at + len(content)))
                    out += [content, between]
                    at += len(content) + len(between)
                if "".join(out) == text:
                    return spans
    spans, at = [], 0
    for content in contents:
        start = text.find(content.strip(), at)
        if start >= 0:
            spans.append((start, start + len(content.strip())))
            at = start + len(content.strip())
    return spans


def _has_images(prompt):
    """True when a message list already has image items in some content."""
    return not isinstance(prompt, str) and any(
        isinstance(m, dict) and isinstance(m.get("content"), (list, tuple))
        and any(isinstance(item, dict) and item.get("type") == "image" for item in m["content"]) for m in prompt)


def _typed_texts(messages):
    """[(message index, item index or None, text)]: what people wrote in system and user messages, a
    string content or the text items of a list content (the items around an image)."""
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in TEXT_ROLES:
            continue
        content = m.get("content")
        if isinstance(content, str) and content:
            out.append((i, None, content))
        elif isinstance(content, (list, tuple)):
            out += [(i, j, item["text"]) for j, item in enumerate(content) if isinstance(item, dict)
                    and item.get("type", "text") == "text" and isinstance(item.get("text"), str) and item["text"]]
    return out


def _replace_texts(messages, marks):
    """The messages with each typed text (message, item) replaced by marks[(message, item)]."""
    out = []
    for i, m in enumerate(messages):
        if (i, None) in marks:
            m = {**m, "content": marks[i, None]}
        elif any(key[0] == i for key in marks):
            m = {**m, "content": [{**item, "text": marks[i, j]} if (i, j) in marks else item
                                  for j, item in enumerate(m["content"])]}
        out.append(m)
    return out


def generate(model, tok, prompt, *, max_new_tokens=128, temperature=0.0, top_k=0, top_p=1.0, seed=None,
             chat=True, enable_thinking=False, template=None, cache=None, stats=None, ids_out=None,
             keep_at=None, kept=None, pixel_values=None, grid_thw=None, speculative=None):
    """Yield the reply's text as it is generated.

    prompt: a string (sent as a user message through the checkpoint's chat template when chat is
    true; continued as plain text otherwise), a list of messages, or a list of token ids. The stop
    token (<|im_end|> or <|endoftext|>) ends the reply and is not shown. `ids_out`, a list,
    receives the new token ids; `stats`, `keep_at`, `kept` and `speculative` as in generate_ids.
    pixel_values, grid_thw (qwen.vision.preprocess): images in the prompt. A string or messages
    without image items get them first in the first user message; the template writes a pad per
    image and each pad is expanded to its image's token count. Ids must hold the expanded pads."""
    given_ids = isinstance(prompt, (list, tuple)) and prompt and all(isinstance(i, int) for i in prompt)
    if chat and template is None and not given_ids:
        template = ChatTemplate.load(model.path)
    if grid_thw is not None and not given_ids:
        if not chat:
            raise QwenError("Images go into a chat prompt (chat=True): plain text has no place for them.",
                            "图像只能放进对话提示词（chat=True）：纯文本里没有它们的位置。")
        if not _has_images(prompt):
            prompt = with_images(prompt, len(torch.as_tensor(grid_thw).reshape(-1, 3)))
    ids = prompt_ids(tok, prompt, chat=chat, template=template, enable_thinking=enable_thinking)
    if grid_thw is not None and not given_ids:
        ids = image_prompt_ids(ids, model.cfg, grid_thw)
    stop = stop_ids(tok)
    stream = TextStream(tok)
    for token in generate_ids(model, ids, max_new_tokens=max_new_tokens, temperature=temperature,
                              top_k=top_k, top_p=top_p, seed=seed, stop=stop, cache=cache, stats=stats,
                              vocab=tok.vocab_size, keep_at=keep_at, kept=kept, pixel_values=pixel_values,
                              grid_thw=grid_thw, speculative=speculative):
        if ids_out is not None:
            ids_out.append(token)
        if token in stop:
            break
        text = stream.push(token)
        if text:
            yield text
    rest = stream.flush()
    if rest:
        yield rest


class Chat:
    """A conversation with the model: the messages so far, and caches to continue from.

    Each turn renders the whole conversation with the chat template, and reads only what no kept
    cache has read yet. Two caches are kept:

      the live cache   everything read so far: the last prompt and the reply. It continues when
                       the new prompt starts with all of that (a template that writes the history
                       back as it was read);
      a saved copy     taken while reading the prompt, where the next turn's prompt will part from
                       it. Qwen3.5's template writes an earlier reply without its <think> block, so
                       the next prompt departs from this one right after '<|im_start|>assistant\n':
                       a Gated DeltaNet state cannot be cut back to that point afterwards, so it is
                       copied when the prompt's reading passes it (Cache.copy: no tensor copied).

    The point is found by rendering the conversation once more with a stand-in reply and a next
    message, and comparing ids; whichever cache is used, its ids are checked against the new
    prompt's first, so a wrong guess only costs reading more. reuse=False: every turn reads the
    whole conversation (the way to measure what reuse saves, bench/bench_chat.py).

    Stopped in the middle of a reply (KeyboardInterrupt, or the caller closing the generator):
    the text shown so far stays in the conversation as the reply; with nothing shown, the
    message is taken back. A cache the interruption may have left half-written (a KeyboardInterrupt
    arrives inside the model's layers) is dropped, and the next turn continues from the saved copy."""

    def __init__(self, model, tok, template=None, enable_thinking=False, reuse=True, **sampling):
        self.model, self.tok = model, tok
        self.template = ChatTemplate.load(model.path) if template is None else template
        self.enable_thinking, self.sampling, self.reuse = enable_thinking, sampling, reuse
        self.reset()

    def reset(self):
        self.messages = []
        self.pixels, self.grids = [], []                         # the conversation's images, in order
        self.cache, self.read = self.model.new_cache(), []      # the live cache and the ids it has read
        self.saved, self.saved_ids = None, []                    # the copy, and the ids it has read
        self.reused, self.prompt_tokens, self.stopped = 0, 0, False

    def ids(self, messages):
        ids = chat_ids(self.tok, self.template, messages, enable_thinking=self.enable_thinking)
        return image_prompt_ids(ids, self.model.cfg, self._images()[1]) if self.grids else ids

    def _images(self):
        """(pixel_values, grid_thw) of every image of the conversation, or (None, None)."""
        if not self.grids:
            return None, None
        return torch.cat(self.pixels), torch.cat(self.grids)

    def _resume(self, ids):
        """(cache, tokens of `ids` it has read): the kept cache that has read the most of `ids`."""
        best = (self.model.new_cache(), 0)
        if not self.reuse:
            return best
        for cache, read in ((self.cache, self.read), (self.saved, self.saved_ids)):
            if cache is not None and best[1] < len(read) < len(ids) and ids[:len(read)] == read:
                best = (cache, len(read))
        if best[0] is self.saved:
            best = (self.saved.copy(), best[1])                  # the saved copy stays for another try
        return best

    def _parting(self, ids):
        """Where the next turn's prompt will part from `ids`: the ids the conversation has in common
        with itself continued by a stand-in reply and message (two, so that a reply starting with
        spaces or newlines, which may join the newline before it into one token, is covered)."""
        common = len(ids)
        for reply in ("x", " \n\nx"):
            later = self.ids(self.messages + [{"role": "assistant", "content": reply}, {"role": "user", "content": "x"}])
            n = next((i for i, (a, b) in enumerate(zip(ids, later)) if a != b), min(len(ids), len(later)))
            common = min(common, n)
        return min(common, len(ids) - 1)

    def say(self, text, max_new_tokens=512, stats=None, pixel_values=None, grid_thw=None):
        """Send a user message; yield the reply's text as it comes. pixel_values, grid_thw
        (qwen.vision.preprocess): images sent with this message, before its text."""
        grid = None if grid_thw is None else torch.as_tensor(grid_thw).reshape(-1, 3)
        if grid is not None and len(grid):
            self.pixels.append(pixel_values)
            self.grids.append(grid)
            self.messages.append({"role": "user", "content": [{"type": "image"}] * len(grid)
                                  + [{"type": "text", "text": text}]})
        else:
            grid = None
            self.messages.append({"role": "user", "content": text})
        ids = self.ids(self.messages)
        cache, self.reused = self._resume(ids)
        images = split_images(self.model.cfg, ids, self.reused, *self._images()) if self.grids else [(None, None)] * 2
        if len(images) == 1:                                     # a kept cache ends inside an image: read it all
            cache, self.reused, images = self.model.new_cache(), 0, [(None, None), self._images()]
        self.prompt_tokens, self.stopped = len(ids), False
        keep_at = self._parting(ids) if self.reuse else None
        if keep_at is not None and keep_at <= self.reused:
            keep_at = None                                       # already past it: the saved copy stays
        out, pieces, kept, whole = [], [], [], False
        try:
            for piece in generate(self.model, self.tok, ids[self.reused:], max_new_tokens=max_new_tokens,
                                  cache=cache, stats=stats, ids_out=out, chat=False,
                                  keep_at=None if keep_at is None else keep_at - self.reused, kept=kept,
                                  pixel_values=images[1][0], grid_thw=images[1][1], **self.sampling):
                pieces.append(piece)
                whole = True                                     # stopped at a yield: the cache is whole
                yield piece
                whole = False
            whole = True
        except (KeyboardInterrupt, GeneratorExit):
            self.stopped = True
            raise
        finally:
            if kept:
                self.saved, self.saved_ids = kept[0], ids[:keep_at]
            if whole:
                self.cache, self.read = cache, ids + out[:-1]    # the last token was sampled, never read
            else:                                                # stopped inside the model: maybe half-written
                self.cache, self.read = None, []
            if pieces or not self.stopped:
                self.messages.append({"role": "assistant", "content": "".join(pieces)})
            else:
                self.messages.pop()                              # stopped before a word: taken back
                if grid is not None:
                    self.pixels.pop(), self.grids.pop()
