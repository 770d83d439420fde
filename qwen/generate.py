"""Generation: the decode loop, choosing the next token, stop tokens, the chat template, text as it comes.

A language model predicts one token at a time. The cache (qwen/cache.py) keeps, per layer, what that
layer needs to continue: the prompt is read once (prefill), then each new token is one small step (decode).

Choosing the next token: greedy (temperature 0) takes the largest logit; sampling divides the logits by
a temperature, keeps the top-k (and those tied with the k-th), then the smallest set whose probabilities
sum to at least top_p (the token that crosses it is kept), and draws one with a seeded generator.

Text comes out as bytes, and one token may hold half a character (`TextStream` waits). The chat template
is a jinja2 program that turns messages into the prompt text the model was trained on.
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


# Choosing the next token

def check_sampling(temperature=0.0, top_k=0, top_p=1.0, prompt=None):
    """This module's checks of what a learner passes, one line each, before any token is read."""
    real = lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool)        # noqa: E731
    for name, v, ok, en, zh in (
            ("temperature", temperature, real(temperature) and math.isfinite(temperature) and temperature >= 0,
             "a number >= 0 (0 always picks the most likely token; Qwen suggests 0.7)", ">= 0 的数（0 表示总是选最可能的词元；Qwen 建议 0.7）"),
            ("top_k", top_k, isinstance(top_k, numbers.Integral) and not isinstance(top_k, bool) and top_k >= 0,
             "a whole number >= 0 (0 keeps every token; Qwen suggests 20)", " >= 0 的整数（0 表示保留所有词元；Qwen 建议 20）"),
            ("top_p", top_p, real(top_p) and 0 <= top_p <= 1, "a number from 0 to 1 (1 keeps every token, 0 only "
             "the most likely one; Qwen suggests 0.8)", " 0 到 1 之间的数（1 表示保留所有词元，0 只保留最可能的那个；Qwen 建议 0.8）")):
        if not ok:
            raise QwenError(name + " must be " + en + ", got {v!r}.", name + " 必须是 " + zh.strip() + "，实际是 {v!r}。", v=v)
    if prompt is not None and len(prompt) == 0:
        raise QwenError("The prompt is empty: give at least one token.", "提示词为空：至少要有一个词元。")


def top_p_filter(logits, p):
    """Keep the smallest set of most likely tokens whose probabilities sum to at least p: sorted, a
    token is kept when the mass before it is below p (the most likely always). Ties in vocabulary order;
    float64 sums (an fp32 sum over 248,320 probabilities rounds away more than a flat tail holds)."""
    check_sampling(top_p=p)
    if p == 1:
        return logits
    probs = logits.double().softmax(-1)                                    # (..., vocab) float64
    ordered, order = probs.sort(dim=-1, descending=True, stable=True)     # most likely first
    mass = ordered.cumsum(-1)                                              # mass up to each token
    keep = torch.ones_like(ordered, dtype=torch.bool)
    keep[..., 1:] = mass[..., :-1] < p                                     # the mass before it is below p
    return logits.masked_fill(~keep.scatter(-1, order, keep), float("-inf"))


def distribution(logits, temperature=1.0, top_k=0, top_p=1.0):
    """What sampling draws from: (ids, probs). Logits (vocab,) / temperature, then top-k, then top-p
    (transformers' warpers, in their order), softmax over what is left. Temperature 0: the argmax."""
    check_sampling(temperature, top_k, top_p)
    z = logits.cpu().to(torch.promote_types(logits.dtype, torch.float32))  # (vocab,) bf16 -> fp32, exactly
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
    """One token id from logits (vocab,): the largest at temperature 0, else drawn from `distribution`
    with a seeded generator, so a run can be repeated exactly."""
    check_sampling(temperature, top_k, top_p)
    if temperature == 0:
        return int(logits.argmax(dim=-1))
    ids, probs = distribution(logits, temperature, top_k, top_p)
    return int(ids[torch.multinomial(probs, 1, generator=generator)])


def stop_ids(tok):
    """The ids that end a reply: <|im_end|> (end of a chat turn) and <|endoftext|>."""
    return {tok.special[t] for t in STOP_TOKENS if t in tok.special}


# Text out, as it comes, and the chat template

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


class ChatTemplate:
    """The checkpoint's chat template, run as transformers does (sandboxed, trim_blocks, lstrip_blocks):
    render(messages, enable_thinking=False) -> prompt text; False writes an empty think block."""

    def __init__(self, source, origin="chat template"):
        from jinja2 import TemplateError
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise TemplateError(message)
        self.source, self.origin, self._error = source, origin, TemplateError
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, **kw: json.dumps(x, ensure_ascii=ensure_ascii, indent=indent)
        env.globals.update(raise_exception=raise_exception, strftime_now=lambda fmt: time.strftime(fmt))
        try:
            self._template = env.from_string(source)
        except TemplateError as e:
            raise QwenError("{file} is not a valid jinja2 template: {why}. Download it again.",
                            "{file} 不是有效的 jinja2 模板：{why}。请重新下载。", file=origin, why=e) from None

    @classmethod
    def load(cls, folder):
        """From a model folder: chat_template.jinja, else the chat_template key of tokenizer_config.json."""
        file = Path(folder) / "chat_template.jinja"
        if file.is_file():
            return cls(file.read_text(encoding="utf-8"), str(file))
        config = Path(folder) / "tokenizer_config.json"
        if config.is_file():
            text = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
            if isinstance(text, str):
                return cls(text, str(config))
        raise QwenError("{folder} has no chat_template.jinja, so the chat format is unknown. Download the "
                        "model again (python main.py download), or pass chat=False for plain text.",
                        "{folder} 里没有 chat_template.jinja，不知道对话格式。请重新下载模型"
                        "（python main.py download），或用 chat=False 直接续写文本。", folder=folder)

    def render(self, messages, add_generation_prompt=True, **options):
        for m in messages:
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise QwenError("Each chat message must be a dict with 'role' and 'content', got {m!r}.",
                                "每条对话消息都必须是带 'role' 和 'content' 的 dict，实际是 {m!r}。", m=m)
        try:
            return self._template.render(messages=messages, add_generation_prompt=add_generation_prompt, **options)
        except self._error as e:                                       # jinja2's TemplateError
            raise QwenError("The chat template ({file}) refused the messages: {why}",
                            "对话模板（{file}）拒绝了这些消息：{why}", file=self.origin, why=e) from None


# The generation loop

@torch.inference_mode()
def generate_ids(model, ids, *, max_new_tokens=128, temperature=0.0, top_k=0, top_p=1.0, seed=None,
                 stop=(), cache=None, stats=None, vocab=None, pixel_values=None, grid_thw=None):
    """Prompt ids in, new token ids out, one at a time (the stop token is yielded too, then it ends).

    The prompt is read in one call (prefill), then one call of length 1 per token (decode); only the
    last position's logits are computed. `stats` (a dict) receives counts and seconds; `vocab`: only
    ids below it are picked (the output rows past the tokenizer's ids are padding)."""
    check_sampling(temperature, top_k, top_p, prompt=ids)                     # before the prompt is read
    cache = model.new_cache() if cache is None else cache
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    ids = torch.as_tensor(ids, dtype=torch.long).reshape(1, -1)                # (1, prompt)
    images = {} if grid_thw is None else dict(pixel_values=pixel_values, grid_thw=grid_thw)
    stats = {} if stats is None else stats
    stats.update(prompt_tokens=ids.shape[1], new_tokens=0, prefill_s=0.0, decode_s=0.0, stopped=False)
    start = time.perf_counter()
    logits = model(ids, cache=cache, last=True, **images)[0, -1, :vocab]      # (vocab,): prefill
    stats["prefill_s"] = time.perf_counter() - start
    start = time.perf_counter()
    for n in range(max_new_tokens):
        token = sample(logits, temperature, top_k, top_p, generator)
        stats.update(new_tokens=n + 1, decode_s=time.perf_counter() - start, stopped=token in stop)
        yield token
        if token in stop:
            return
        if n + 1 < max_new_tokens:
            logits = model(torch.tensor([[token]]), cache=cache, last=True)[0, -1, :vocab]   # decode: one token
            stats["decode_s"] = time.perf_counter() - start


def generate(model, tok, prompt, *, max_new_tokens=128, chat=True, enable_thinking=False, template=None,
             ids_out=None, decode=generate_ids, pixel_values=None, grid_thw=None, **options):
    """Yield the reply's text as it is generated.

    prompt: a string (a user message when chat, else plain text), a list of messages, or of token ids.
    The stop token ends the reply, unshown; `ids_out` receives the new ids; options go to `decode`
    (chapter 12: qwen.mtp.speculative_ids). pixel_values, grid_thw: images, put into the first user message."""
    given_ids = isinstance(prompt, (list, tuple)) and prompt and all(isinstance(i, int) for i in prompt)
    images = {} if grid_thw is None else dict(pixel_values=pixel_values, grid_thw=grid_thw)
    if not given_ids:
        if images and not chat:
            raise QwenError("Images go into a chat prompt (chat=True): plain text has no place for them.",
                            "图像只能放进对话提示词（chat=True）：纯文本里没有它们的位置。")
        template = ChatTemplate.load(model.path) if chat and template is None else template
        if images:
            prompt = with_images(prompt, len(torch.as_tensor(grid_thw).reshape(-1, 3)))
    ids = prompt_ids(tok, prompt, chat=chat, template=template, enable_thinking=enable_thinking)
    ids = image_prompt_ids(ids, model.cfg, grid_thw) if images and not given_ids else ids
    stop, stream = stop_ids(tok), TextStream(tok)
    for token in decode(model, ids, max_new_tokens=max_new_tokens, stop=stop, vocab=tok.vocab_size, **images, **options):
        if ids_out is not None:
            ids_out.append(token)
        if token in stop:
            break
        text = stream.push(token)
        if text:                                                   # '' while a character is unfinished
            yield text
    rest = stream.flush()
    if rest:
        yield rest


def prompt_ids(tok, prompt, *, chat=True, template=None, enable_thinking=False):
    """Token ids for a prompt: a string (a user message when chat, else plain text), messages, or ids."""
    if isinstance(prompt, (list, tuple)) and prompt and all(isinstance(i, int) for i in prompt):
        return list(prompt)
    if isinstance(prompt, str) and not chat:
        return tok.encode(prompt)
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    if template is None:
        raise QwenError("A chat prompt needs the checkpoint's chat template (template=ChatTemplate.load(path)).",
                        "对话提示词需要检查点的对话模板（template=ChatTemplate.load(path)）。")
    return tok.encode(template.render(messages, enable_thinking=enable_thinking))


def image_prompt_ids(ids, cfg, grid_thw):
    """The ids with each <|image_pad|> repeated to its image's token count, t * h * w / merge^2 (448 x 448
    pixels: a 1 x 28 x 28 grid, 196 tokens), as transformers' processor expands them."""
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
    return [j for i in ids for j in ([i] * next(counts) if i == image_id else [i])]


def with_images(prompt, images):
    """A prompt string or messages with `images` {'type': 'image'} items put first into the first user
    message's content, unless some message already has image items."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
    if not images or any(isinstance(m.get("content"), (list, tuple)) and any(
            isinstance(i, dict) and i.get("type") == "image" for i in m["content"]) for m in messages):
        return messages
    for m in messages:
        if m.get("role") == "user":
            text = [{"type": "text", "text": m["content"]}] if isinstance(m["content"], str) else list(m["content"])
            m["content"] = [{"type": "image"}] * images + text
            return messages
    raise QwenError("An image goes into a user message, and these messages have none.",
                    "图像要放进用户消息里，但这些消息里没有用户消息。")
