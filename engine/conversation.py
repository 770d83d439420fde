"""A conversation with the model (`python main.py chat`): the messages so far, and caches to continue from.

Each turn renders the whole conversation with the chat template and reads only what no kept cache
has read yet. Special-token text typed in a system or user message ('<|im_end|>') is encoded as
plain text (`chat_ids`), so a message cannot end its turn or open another.
"""
import functools
import time

import torch

from qwen.generate import ChatTemplate, generate, generate_ids, image_prompt_ids
from qwen.mtp import speculative_ids


def _image_args(pixel_values, grid_thw):
    return {} if grid_thw is None else {"pixel_values": pixel_values, "grid_thw": grid_thw}


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

    def __init__(self, model, tok, template=None, enable_thinking=False, reuse=True, speculative=None, **sampling):
        self.model, self.tok = model, tok
        self.template = ChatTemplate.load(model.path) if template is None else template
        self.enable_thinking, self.sampling, self.reuse = enable_thinking, sampling, reuse
        self.decode = generate_ids if speculative is None else functools.partial(speculative_ids, k=speculative)
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
        out, pieces, kept, whole, rest = [], [], [], False, ids[self.reused:]
        first = (0, 0.0)                                         # tokens read before the copy, seconds
        stats = {} if stats is None else stats
        try:
            at = None if keep_at is None else keep_at - self.reused
            parts = [] if at is None or not 0 < at < len(rest) else (
                split_images(self.model.cfg, rest, at, *images[-1]) if self.grids else [(None, None)] * 2)
            if len(parts) == 2:                                      # (1: the point falls inside an image)
                start = time.perf_counter()
                with torch.inference_mode():                         # as generate_ids reads the rest
                    self.model(torch.tensor([rest[:at]]), cache=cache, last=True, **_image_args(*parts[0]))
                kept.append(cache.copy())
                rest, images, first = rest[at:], [parts[1]], (at, time.perf_counter() - start)
            for piece in generate(self.model, self.tok, rest, max_new_tokens=max_new_tokens, cache=cache,
                                  stats=stats, ids_out=out, chat=False, decode=self.decode,
                                  **_image_args(*images[-1]), **self.sampling):
                pieces.append(piece)
                whole = True                                     # stopped at a yield: the cache is whole
                yield piece
                whole = False
            whole = True
        except (KeyboardInterrupt, GeneratorExit):
            self.stopped = True
            raise
        finally:
            stats["prompt_tokens"] = stats.get("prompt_tokens", 0) + first[0]    # the whole prompt read
            stats["prefill_s"] = stats.get("prefill_s", 0.0) + first[1]
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
