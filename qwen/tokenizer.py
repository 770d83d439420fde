"""Byte-level BPE, written by hand: how Qwen3.5 turns text into token ids, and back.

Encoding is four steps:
  1. Normalize: Unicode NFC, so "é" typed as one code point or as e + accent encodes alike.
  2. Split: special tokens such as <|im_start|> are cut out whole; the rest is split by a regex
     into pieces: a word with the character before it (usually a space), one digit, a run of
     punctuation, a run of whitespace. BPE never merges across two pieces.
  3. Bytes: each piece becomes its UTF-8 bytes, and each byte is written as one printable
     character (the byte-level alphabet: 'Ġ' is a space, 'Ċ' a newline). 256 symbols cover
     every text in every script, so there is no "unknown token".
  4. Merge: starting from single bytes, repeatedly join the adjacent pair that was learned
     earliest (the lowest merge rank), until no learned pair is left. Each symbol left is a token.

Decoding runs step 3 backwards: ids -> symbols -> bytes -> UTF-8 text.

    from qwen.tokenizer import Tokenizer
    tok = Tokenizer.load(model_path)      # tokenizer.json, or vocab.json + merges.txt
    tok.encode("Hello!")                  # [9419, 0]
    tok.decode([9419, 0])                 # 'Hello!'
"""
import heapq
import json
import unicodedata
from pathlib import Path

import regex

from qwen.lang import QwenError
from qwen.files import read_json

# Qwen3.5's split rule: contractions; a letter run (with marks) and the one character before it;
# single digits; a punctuation run with its newlines; newline runs; whitespace runs.
QWEN35_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                  r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_alphabet():
    """byte -> printable character. Bytes that are already visible keep their own character;
    the rest (control codes, space, ...) are moved to code points from 256 up: 32 -> 'Ġ'."""
    visible = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, shifted = {}, 0
    for b in range(256):
        if b in visible:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + shifted)
            shifted += 1
    return table


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

    def __init__(self, vocab, merges, special, pattern=QWEN35_PATTERN, nfc=True, ignore_merges=False,
                 source="tokenizer"):
        self.vocab = vocab                                        # byte-level symbols -> id
        self.ranks = {pair: rank for rank, pair in enumerate(merges)}   # (left, right) -> rank
        self.special = special                                    # "<|im_start|>" -> 248045
        self.pattern = regex.compile(pattern)
        self.nfc = nfc
        self.ignore_merges = ignore_merges                        # a whole piece in the vocab is one token
        self.source = source
        self.id_to_symbols = {i: s for s, i in vocab.items()}
        self.id_to_special = {i: s for s, i in special.items()}
        self.vocab_size = max([*vocab.values(), *special.values()]) + 1
        names = sorted(special, key=len, reverse=True)           # longest first: <|a|b|> before <|a|>
        self._special_re = regex.compile("|".join(map(regex.escape, names))) if names else None
        self._cache = {}
        for left, right in merges:
            if left + right not in vocab:
                raise QwenError("{src}: the merge {l!r} + {r!r} makes {t!r}, which is not in the vocabulary.",
                                "{src}：合并 {l!r} + {r!r} 得到 {t!r}，但它不在词表里。",
                                src=source, l=left, r=right, t=left + right)

    # ---------------------------------------------------------------------------- loading

    @classmethod
    def load(cls, model_path):
        """From a model folder: tokenizer.json if present, else vocab.json + merges.txt."""
        folder = Path(model_path).expanduser()
        if (folder / "tokenizer.json").is_file():
            return cls.from_tokenizer_json(folder / "tokenizer.json")
        if (folder / "vocab.json").is_file() or (folder / "merges.txt").is_file():
            return cls.from_vocab_and_merges(folder)
        raise QwenError("{folder} has no tokenizer.json (nor vocab.json + merges.txt). Download the model "
                        "again (python main.py download), or use --tiny.",
                        "{folder} 里没有 tokenizer.json（也没有 vocab.json + merges.txt）。请重新下载模型"
                        "（python main.py download），或使用 --tiny。", folder=folder)

    @classmethod
    def from_tokenizer_json(cls, file):
        data = read_json(file)
        model = data.get("model") or {}
        if model.get("type") != "BPE" or model.get("byte_fallback") or not _is_byte_level(data):
            raise QwenError("{file} belongs to another model family ({kind}); Qwen3.5 uses byte-level BPE. "
                            "Is --model pointing at a Qwen3.5 folder?",
                            "{file} 属于别的模型家族（{kind}）；Qwen3.5 使用字节级 BPE。"
                            "--model 指向的是 Qwen3.5 的文件夹吗？", file=file, kind=_describe(data))
        merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model.get("merges", [])]
        special = {t["content"]: t["id"] for t in data.get("added_tokens", [])}
        normalizer = json.dumps(data.get("normalizer"))
        return cls(model["vocab"], merges, special, pattern=_split_pattern(data) or QWEN35_PATTERN,
                   nfc='"NFC"' in normalizer, ignore_merges=bool(model.get("ignore_merges")), source=str(file))

    @classmethod
    def from_vocab_and_merges(cls, folder):
        for name in ("vocab.json", "merges.txt"):
            if not (folder / name).is_file():
                raise QwenError("{folder} has {have} but no {name}: the tokenizer needs both. Download them again.",
                                "{folder} 里有 {have} 却没有 {name}：分词器两个都需要。请重新下载。",
                                folder=folder, name=name,
                                have="merges.txt" if name == "vocab.json" else "vocab.json")
        vocab = read_json(folder / "vocab.json")
        lines = (folder / "merges.txt").read_text(encoding="utf-8").splitlines()
        merges = [tuple(line.split(" ", 1)) for line in lines if line and not line.startswith("#version")]
        special = {}
        if (folder / "tokenizer_config.json").is_file():
            added = read_json(folder / "tokenizer_config.json").get("added_tokens_decoder", {})
            special = {t["content"]: int(i) for i, t in added.items()}
        return cls(vocab, merges, special, source=str(folder / "vocab.json"))

    # ---------------------------------------------------------------------------- encoding

    def encode(self, text):
        """Text -> token ids. Special tokens written in the text are matched whole."""
        if not isinstance(text, str):
            raise QwenError("encode() takes a str, not {t}.", "encode() 需要 str，而不是 {t}。", t=type(text).__name__)
        _check_unicode(text)
        if self.nfc:
            text = unicodedata.normalize("NFC", text)
        ids = []
        for chunk, special in self.split_special(text):
            if special:
                ids.append(self.special[chunk])
            else:
                for piece in self.pattern.findall(chunk):
                    ids.extend(self._piece_ids(piece))
        return ids

    def split_special(self, text):
        """[(chunk, is_special)]: the text cut around special tokens."""
        if self._special_re is None:
            return [(text, False)] if text else []
        out, start = [], 0
        for m in self._special_re.finditer(text):
            if m.start() > start:
                out.append((text[start:m.start()], False))
            out.append((m.group(), True))
            start = m.end()
        if start < len(text):
            out.append((text[start:], False))
        return out

    def pieces(self, text):
        """The regex pieces of a text (after NFC), special tokens kept whole: what BPE works on."""
        text = unicodedata.normalize("NFC", text) if self.nfc else text
        return [p for chunk, special in self.split_special(text)
                for p in ([chunk] if special else self.pattern.findall(chunk))]

    def _piece_ids(self, piece):
        ids = self._cache.get(piece)
        if ids is None:
            if len(self._cache) >= 200_000:                         # bounded memory on huge inputs
                self._cache.clear()
            ids = self._cache[piece] = self.bpe(to_symbols(piece))
        return ids

    def bpe(self, symbols):
        """Merge one piece's byte symbols into tokens: always the earliest-learned adjacent pair first.

        With ignore_merges (set in tokenizer.json), a piece that is itself a token is taken whole,
        as tiktoken does: a few hundred tokens, such as '人力资源', can only be produced that way."""
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
                continue                                            # that pair no longer exists
            parts[i], parts[j] = parts[i] + parts[j], None          # merge the right part into the left
            nxt[i] = nxt[j]
            if nxt[i] >= 0:
                prv[nxt[i]] = i
            for a in (prv[i], i):                                   # the two new neighbouring pairs
                if a >= 0 and nxt[a] >= 0 and (pair := (parts[a], parts[nxt[a]])) in self.ranks:
                    heapq.heappush(heap, (self.ranks[pair], a))
        return [self.vocab[p] for p in parts if p is not None]

    # ---------------------------------------------------------------------------- decoding

    def token_bytes(self, i):
        """The raw bytes of one token (special tokens: their text)."""
        if i in self.id_to_special:
            return self.id_to_special[i].encode("utf-8")
        if i not in self.id_to_symbols:
            raise self._bad_id(i)
        return to_bytes(self.id_to_symbols[i])

    def decode(self, ids):
        """Token ids -> text. Bytes that do not form whole UTF-8 characters become U+FFFD."""
        return b"".join(self.token_bytes(int(i)) for i in ids).decode("utf-8", errors="replace")

    def id_to_piece(self, i):
        """The token as stored in the vocabulary, e.g. 'ĠHello' (special tokens as written)."""
        if i in self.id_to_special:
            return self.id_to_special[i]
        if i not in self.id_to_symbols:
            raise self._bad_id(i)
        return self.id_to_symbols[i]

    def piece_to_id(self, piece):
        if piece in self.special:
            return self.special[piece]
        if piece not in self.vocab:
            raise QwenError("{p!r} is not a token of this vocabulary (tokens are byte-level symbols, "
                            "e.g. 'ĠHello' for ' Hello').",
                            "{p!r} 不是这个词表里的词元（词元用字节级符号写，例如 ' Hello' 写作 'ĠHello'）。",
                            p=piece)
        return self.vocab[piece]

    def readable(self, i):
        """A token as a learner should see it: ' Hello', '\\n', or '<e6 af>' for part of a character."""
        raw = self.token_bytes(i)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return "<" + raw.hex(" ") + ">"

    def _bad_id(self, i):
        return QwenError("Token id {i} is out of range: this vocabulary has ids 0..{top}{pad}.",
                         "词元编号 {i} 超出范围：这个词表的编号是 0..{top}{pad_zh}。",
                         i=i, top=self.vocab_size - 1,
                         pad=" (embedding rows past the vocabulary are unused padding)" if i >= self.vocab_size else "",
                         pad_zh="（嵌入表中超出词表的行是未使用的填充）" if i >= self.vocab_size else "")

    def __len__(self):
        return self.vocab_size

    def __repr__(self):
        return f"Tokenizer({self.source}, {len(self.vocab)} BPE tokens + {len(self.special)} special)"


def _is_byte_level(data):
    return '"ByteLevel"' in json.dumps([data.get("pre_tokenizer"), data.get("decoder")])


def _split_pattern(data):
    """The regex of the Split pre-tokenizer, if the file has one."""
    pre = data.get("pre_tokenizer") or {}
    for step in pre.get("pretokenizers", [pre]):
        if step and step.get("type") == "Split":
            return step.get("pattern", {}).get("Regex")
    return None


def _describe(data):
    model = data.get("model") or {}
    if model.get("type") != "BPE":
        return f"a {model.get('type')} model"
    if model.get("byte_fallback"):
        return "SentencePiece-style BPE with byte fallback"
    return "BPE without the byte-level alphabet"


def _check_unicode(text):
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise QwenError("The text has a lone surrogate U+{cp:04X} at position {pos}: it is half of a UTF-16 "
                        "pair, not a character, and has no UTF-8 bytes. Clean the text first, e.g. "
                        "text.encode('utf-8', 'replace').decode('utf-8').",
                        "文本第 {pos} 个位置有一个孤立的代理码 U+{cp:04X}：它是 UTF-16 代理对的一半，不是字符，"
                        "没有 UTF-8 字节。请先清理文本，例如 text.encode('utf-8', 'replace').decode('utf-8')。",
                        cp=ord(text[e.start]), pos=e.start) from None
