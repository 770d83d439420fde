"""Byte-level BPE, written by hand: how Qwen3.5 turns text into token ids, and back.

Encoding is four steps:
  1. Special tokens (<|im_start|> ...) are cut out whole, before normalization (as Hugging Face does).
  2. The rest is normalized (NFC: "é" as one code point or as e + accent encodes alike) and split
     by a regex into pieces: a word with the character before it, one digit, a run of punctuation,
     a run of whitespace. BPE never merges across two pieces.
  3. Each piece becomes its UTF-8 bytes, each byte one printable character ('Ġ' is a space, 'Ċ' a
     newline): 256 symbols cover every text in every script, so there is no "unknown token".
  4. Starting from single bytes, the adjacent pair learned earliest (lowest merge rank) is joined,
     until no learned pair is left. Each symbol left is a token.

Decoding runs step 3 backwards: ids -> symbols -> bytes -> UTF-8 text.
    tok = Tokenizer.load(model_path)      # the folder's tokenizer.json
    tok.encode("Hello!")                  # [9419, 0]
    tok.decode([9419, 0])                 # 'Hello!'
engine/tokens.py adds speed (a cache, a compact merge for long pieces), the checks of damaged files and
piece_to_id.
"""
import heapq
import json
import operator
import unicodedata
from pathlib import Path

import regex

from qwen.files import kind_of, read_json
from qwen.lang import QwenError

# Contractions; a letter run (with marks) and the one character before it; single digits;
# a punctuation run with its newlines; newline runs; whitespace runs.
QWEN35_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                  r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_alphabet():
    """byte -> printable character. Bytes that are already visible keep their own character;
    the rest (control codes, space, ...) are moved to code points from 256 up: 32 -> 'Ġ'."""
    visible = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    hidden = [b for b in range(256) if b not in visible]
    return {**{b: chr(b) for b in visible}, **{b: chr(256 + k) for k, b in enumerate(hidden)}}


BYTE_TO_CHAR = byte_alphabet()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}
_LATIN1_TO_ALPHABET = str.maketrans({chr(b): c for b, c in BYTE_TO_CHAR.items()})


def bytes_to_symbols(raw):
    """Raw bytes as byte-level symbols, one character per byte: b' \xe4' -> 'Ġä'."""
    return raw.decode("latin-1").translate(_LATIN1_TO_ALPHABET)


def to_symbols(text):
    """A piece of text as byte-level symbols: ' 世' -> 'Ġä¸ĸ' (one character per UTF-8 byte)."""
    return bytes_to_symbols(text.encode("utf-8"))


def to_bytes(symbols):
    """The inverse of to_symbols, as raw bytes (which may end in the middle of a character)."""
    return bytes(CHAR_TO_BYTE[c] for c in symbols)


class Tokenizer:
    """Byte-level BPE with Qwen3.5's vocabulary, merges and special tokens."""

    def __init__(self, vocab, merges, special, pattern=QWEN35_PATTERN, nfc=True, ignore_merges=False, source="tokenizer"):
        self.id_to_symbols = {i: s for s, i in vocab.items()}     # id -> symbols
        self.vocab = vocab                                        # byte-level symbols -> id
        self.ranks = dict(zip(merges, range(len(merges))))       # (left, right) -> rank
        self.special = special                                    # "<|im_start|>" -> 248045
        self.id_to_special = {i: s for s, i in special.items()}
        self.pattern = regex.compile(pattern)
        self.nfc = nfc
        self.ignore_merges = ignore_merges                        # a whole piece in the vocab is one token
        self.source = source
        self.vocab_size = max([*vocab.values(), *special.values()]) + 1
        names = sorted(special, key=len, reverse=True)           # longest first: <|a|b|> before <|a|>
        self._special_re = regex.compile("|".join(map(regex.escape, names))) if names else None

    # ---------------------------------------------------------------------------- loading

    @classmethod
    def load(cls, model_path):
        """From a model folder's tokenizer.json."""
        folder = Path(model_path).expanduser()
        if kind_of(folder / "tokenizer.json") is None:
            raise QwenError("{folder} has no tokenizer.json. Download the model again (python main.py download), or "
                            "use --tiny.", "{folder} 里没有 tokenizer.json。请重新下载模型（python main.py download），或使用 --tiny。",
                            folder=folder)
        return cls.from_tokenizer_json(folder / "tokenizer.json")

    @classmethod
    def from_tokenizer_json(cls, file, data=None):
        """tokenizer.json: vocabulary, merges ("left right" or [left, right]), special tokens, split regex, NFC."""
        data = read_json(file) if data is None else data                  # data: already read and checked
        model = data["model"]
        merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model.get("merges", [])]
        special = {a["content"]: a["id"] for a in data.get("added_tokens", [])}
        pre = data.get("pre_tokenizer") or {}
        split = [s["pattern"]["Regex"] for s in pre.get("pretokenizers", [pre]) if s.get("type") == "Split"]
        return cls(model["vocab"], merges, special, pattern=(split or [QWEN35_PATTERN])[0],
                   nfc='"NFC"' in json.dumps(data.get("normalizer")), ignore_merges=bool(model.get("ignore_merges")),
                   source=str(file))

    # ---------------------------------------------------------------------------- encoding

    def encode(self, text, special=True, plain=()):
        """Text -> token ids. Special tokens written in the text are matched whole, as Hugging Face does.
        special=False: their text is ordinary text; plain: (start, end) ranges where it is (user messages)."""
        _check_text(text)
        ids = []
        for chunk, is_special in self.split_special(text, list(plain)) if special else [(text, False)]:
            if is_special:
                ids.append(self.special[chunk])
            else:
                for piece in self._split(self._normalize(chunk)):          # one piece at a time
                    ids.extend(self._piece_ids(piece))
        return ids

    def split_special(self, text, plain=()):
        """(chunk, is_special) pairs, in order: the text cut around special tokens. A special token
        that overlaps one of the `plain` ranges stays part of the ordinary text around it."""
        start = at = 0
        while self._special_re is not None and (m := self._special_re.search(text, at)) is not None:
            if any(a < m.end() and m.start() < b for a, b in plain):
                at = m.start() + 1                                   # text: look for the next one after it
                continue
            if m.start() > start:
                yield text[start:m.start()], False
            yield m.group(), True
            start = at = m.end()
        if start < len(text):
            yield text[start:], False

    def _normalize(self, chunk):
        return unicodedata.normalize("NFC", chunk) if self.nfc else chunk      # Python's Unicode tables

    def _split(self, chunk):
        """The regex pieces of a normalized chunk; text between two matches is a piece too (HF's Split)."""
        start = 0
        for m in self.pattern.finditer(chunk):
            if m.start() > start:
                yield chunk[start:m.start()]
            if m.end() > m.start():
                yield m.group()
            start = m.end()
        if start < len(chunk):
            yield chunk[start:]

    def pieces(self, text):
        """The regex pieces of a text (after NFC), special tokens kept whole: what BPE works on."""
        return [p for chunk, special in self.split_special(text)
                for p in ([chunk] if special else self._split(self._normalize(chunk)))]

    def _piece_ids(self, piece):
        return self.bpe(to_symbols(piece))

    def bpe(self, symbols):
        """Merge one piece's byte symbols into tokens: always the earliest-learned adjacent pair first.
        With ignore_merges, a piece that is itself a token is taken whole, as tiktoken does."""
        if self.ignore_merges and symbols in self.vocab:
            return [self.vocab[symbols]]
        parts = list(symbols)                                       # one symbol per byte to start
        nxt = list(range(1, len(parts))) + [-1]                     # a linked list over the parts
        prv = list(range(-1, len(parts) - 1))
        heap = [(self.ranks[p], i) for i, p in enumerate(zip(parts, parts[1:])) if p in self.ranks]
        heapq.heapify(heap)                                         # (rank, position): leftmost wins ties
        while heap:
            rank, i = heapq.heappop(heap)
            j = nxt[i]
            if parts[i] is None or j < 0 or self.ranks.get((parts[i], parts[j])) != rank:
                continue                                            # that pair was merged away
            parts[i], parts[j] = parts[i] + parts[j], None          # merge the right part into the left
            nxt[i] = nxt[j]
            if nxt[i] >= 0:
                prv[nxt[i]] = i
            for a in (prv[i], i):                                   # the two new neighbouring pairs
                if a >= 0 and nxt[a] >= 0 and (pair := (parts[a], parts[nxt[a]])) in self.ranks:
                    heapq.heappush(heap, (self.ranks[pair], a))
        return [self.vocab[p] for p in parts if p is not None]

    # ---------------------------------------------------------------------------- decoding

    def decode(self, ids):
        """Token ids -> text. Bytes that do not form whole UTF-8 characters become U+FFFD."""
        return b"".join(map(self._bytes, _token_ids(ids))).decode("utf-8", errors="replace")

    def token_bytes(self, i):
        """The raw bytes of one token (special tokens: their text)."""
        return self._bytes(*_token_ids([i], "token_bytes()"))

    def _bytes(self, i):
        symbols = self._symbols(i)
        return symbols.encode("utf-8") if i in self.id_to_special else to_bytes(symbols)

    def id_to_piece(self, i):
        """The token as stored in the vocabulary, e.g. 'ĠHello' (special tokens as written)."""
        return self._symbols(*_token_ids([i], "id_to_piece()"))

    def _symbols(self, i):
        if i in self.id_to_special:
            return self.id_to_special[i]
        if i not in self.id_to_symbols:
            pad = i >= self.vocab_size
            raise QwenError("Token id {i} is out of range: this vocabulary has ids 0..{top}{pad}.",
                            "词元编号 {i} 超出范围：这个词表的编号是 0..{top}{pad_zh}。", i=i, top=self.vocab_size - 1,
                            pad=" (embedding rows past the vocabulary are unused padding)" if pad else "",
                            pad_zh="（嵌入表中超出词表的行是未使用的填充）" if pad else "")
        return self.id_to_symbols[i]

    def readable(self, i):
        """A token as a learner should see it: ' Hello', '\\n', or '<e6 af>' for part of a character."""
        raw = self.token_bytes(i)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return "<" + raw.hex(" ") + ">"


# -------------------------------------------------------------------------------- the checks

_SURROGATE = regex.compile(r"[\ud800-\udfff]")


def _check_text(text):
    if not isinstance(text, str):
        raise QwenError("encode() takes a str, not {t}.", "encode() 需要 str，而不是 {t}。", t=type(text).__name__)
    if m := _SURROGATE.search(text):
        raise QwenError("The text has a lone surrogate U+{cp:04X} at position {pos}: half of a UTF-16 pair, with "
                        "no UTF-8 bytes. Clean the text first: text.encode('utf-8', 'replace').decode('utf-8').",
                        "文本第 {pos} 个位置有一个孤立的代理码 U+{cp:04X}：它是 UTF-16 代理对的一半，没有 UTF-8 字节。"
                        "请先清理文本：text.encode('utf-8', 'replace').decode('utf-8')。", cp=ord(m.group()), pos=m.start())


def _token_ids(ids, caller="decode()"):
    """The ids as ints: whole numbers only (numpy and torch integers too), never bool, float or str."""
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__") or getattr(ids, "ndim", 1) == 0:
        raise QwenError("decode() takes a list of token ids, not {t}.", "decode() 需要词元编号的列表，而不是 {t}。",
                        t=type(ids).__name__)
    out = []
    for k, i in enumerate(ids):
        try:
            out.append(operator.index(i if not isinstance(i, bool) else None))
        except TypeError:
            raise QwenError("{caller} takes whole-number token ids; item {k} is {v!r} ({t}).", "{caller} 需要整数的词元编号；"
                            "第 {k} 项是 {v!r}（{t}）。", caller=caller, k=k, v=i, t=type(i).__name__) from None
    return out

