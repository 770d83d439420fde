"""The tokenizer's engine: what makes qwen/tokenizer.py fast on any text, and what names a hostile file.

The lesson's Tokenizer is the algorithm as chapter 2 teaches it. This file adds, beside it:
- `FastTokenizer`, the same tokenizer with a bounded cache of short pieces, a compact merge for long
  pieces without a break (a page of Chinese without punctuation, 'a' * 10**7: integer arrays and
  positions grouped by rank, about 20 bytes per input byte instead of over a hundred), NFC that
  stays linear on long runs of combining marks, and a time limit on a split rule that backtracks.
  It checks the vocabulary (one id per token, all 256 byte symbols) and names a token outside the
  byte alphabet when decoded; it adds piece_to_id. tests/test_tokenizer.py checks it gives the lesson's ids.
- `load_tokenizer(path)`: tokenizer.json or vocab.json + merges.txt, every field checked first (one
  line naming the file), and the same folder with the same files read once.
"""
import heapq
import json
import time
import unicodedata
from array import array
from pathlib import Path

import regex

from qwen.config import Config
from qwen.files import kind_of, read_json, read_small
from qwen.lang import QwenError
from qwen.tokenizer import BYTE_TO_CHAR, Tokenizer, _SURROGATE, bytes_to_symbols, to_symbols

MERGES_EN = "merges: pairs of symbols, as \"left right\" strings (merges.txt: one per line) or [left, right]"
MERGES_ZH = "合并规则：成对的符号，写成 \"左 右\" 字符串（merges.txt 每行一个）或 [左, 右]"
MAX_SPECIAL_TOKENS = 4096                   # matched by one regex alternation: slow beyond a few thousand
MAX_TOKEN_ID = Config.RANGES["vocab_size"] - 1

# NFC first puts each run of combining marks in order of their combining class, and Python does
# that by insertion sort: quadratic in the run's length. Long runs are sorted beforehand, stably,
# with the same key, so Python finds them already in order; the result is the same. Ordinary text
# never has such runs (Unicode's "stream-safe" limit is 30 marks in a row). The regex only finds
# candidates; unicodedata decides what is a mark.
_LONG_MARK_RUN = regex.compile(r"\P{ccc=0}{32,}")


def _in_canonical_order(m):
    run = m.group()
    starts = [i for i, c in enumerate(run) if not unicodedata.combining(c)]   # not a mark for Python
    parts, begin = [], 0
    for end in starts + [len(run)]:
        parts.append("".join(sorted(run[begin:end], key=unicodedata.combining)) + run[end:end + 1])
        begin = end + 1
    return "".join(parts)


class FastTokenizer(Tokenizer):
    """The lesson's Tokenizer, with the same ids, in bounded memory and time on any text."""

    LONG_PIECE = 256            # bytes: longer pieces are merged by _bpe_long and not cached
    CACHE_SIZE = 200_000        # pieces: the cache of short pieces is emptied when it reaches this

    def __init__(self, vocab, merges, special, *args, source="tokenizer", **kwargs):
        check_vocab(vocab, special, source)
        super().__init__(vocab, merges, special, *args, source=source, **kwargs)
        self._cache = {}
        self._long = None                                         # _bpe_long's tables, made on first use

    def __repr__(self):
        return f"Tokenizer({self.source}, {len(self.vocab)} BPE tokens + {len(self.special)} special)"

    def piece_to_id(self, piece):
        """The id of a token as stored in the vocabulary ('ĠHello'), or of a special token."""
        if not isinstance(piece, str) or piece not in self.vocab and piece not in self.special:
            raise QwenError("{p!r} is not a token of this vocabulary (tokens are byte-level symbols, e.g. "
                            "'ĠHello' for ' Hello'); piece_to_id() takes a str, not {t}.",
                            "{p!r} 不是这个词表里的词元（词元用字节级符号写，例如 ' Hello' 写作 'ĠHello'）；"
                            "piece_to_id() 需要 str，而不是 {t}。", p=piece, t=type(piece).__name__)
        return self.special.get(piece, self.vocab.get(piece))

    def _bytes(self, i):
        """The lesson's, with one line for a token not written in the byte alphabet: checked when decoded,
        not by a pass over the whole vocabulary at load."""
        try:
            return super()._bytes(i)
        except KeyError:
            raise QwenError("{src}: the token {i} is {s!r}, which is not written in the byte-level alphabet "
                            "(256 characters, one per byte value), so it has no bytes. " + DAMAGED[0],
                            "{src}：词元 {i} 是 {s!r}，它不是用字节级字母表（256 个字符，每个字节值一个）写的，"
                            "所以没有字节。" + DAMAGED[1], src=self.source, i=i, s=self._symbols(i)[:40]) from None

    @classmethod
    def load(cls, model_path):
        return load_tokenizer(model_path, cls)

    def _normalize(self, chunk):
        return super()._normalize(_LONG_MARK_RUN.sub(_in_canonical_order, chunk) if self.nfc else chunk)

    def _split(self, chunk):
        """The lesson's split, stopped after a time limit far above the real rule's when a rule from
        another tokenizer.json backtracks without end ((a|aa)+$ on 'aaa...b')."""
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
                    continue                                        # that pair was merged away
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


# ---------------------------------------------------------------------------- loading, checked

DAMAGED = ("The file is damaged or not Qwen3.5's; download it again.", "文件损坏或不是 Qwen3.5 的；请重新下载。")

_LOADED = {}                                        # (class, _files_key) -> tokenizer: the last folder loaded
_SETTLED_NS = 2 * 10**9                             # files changed more recently than this are read again
_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json", "config.json")


def load_tokenizer(model_path, cls=FastTokenizer):
    """The tokenizer of a model folder: tokenizer.json if present, else vocab.json + merges.txt, every
    field checked. The same folder with the same files gives the same tokenizer without reading them
    again (parsing the 248k-entry vocabulary is the slow part); a file changed, added or removed is read."""
    folder = Path(model_path).expanduser()
    key = (cls, _files_key(folder))
    if key in _LOADED:
        return _LOADED[key]
    if kind_of(folder / "tokenizer.json") is not None:
        data = read_json(folder / "tokenizer.json")
        check_tokenizer_json(data, folder / "tokenizer.json")
        tok = cls.from_tokenizer_json(folder / "tokenizer.json", data)
    elif kind_of(folder / "vocab.json") is not None or kind_of(folder / "merges.txt") is not None:
        tok = from_vocab_and_merges(cls, folder)
    else:
        raise QwenError("{folder} has no tokenizer.json (nor vocab.json + merges.txt). Download the model "
                        "again (python main.py download), or use --tiny.",
                        "{folder} 里没有 tokenizer.json（也没有 vocab.json + merges.txt）。请重新下载模型"
                        "（python main.py download），或使用 --tiny。", folder=folder)
    check_fits(tok, folder)
    if key[1] is not None:
        _LOADED.clear()                               # one folder at a time: a 248k vocabulary is large
        _LOADED[key] = tok
    return tok


def _files_key(folder):
    """(folder, (name, size, mtime, ctime, inode) of each file load reads), or None when a file changed
    in the last 2 s: a file's times tick in steps of a few milliseconds, so a write of the same size
    just after another can leave its stat as it was (git's "racily clean" files)."""
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


def from_vocab_and_merges(cls, folder):
    """vocab.json + merges.txt (+ tokenizer_config.json for the special tokens), for folders without
    tokenizer.json. These files carry no ignore_merges flag, and without it merges derived from the
    vocabulary (as the tiny checkpoint's are) cannot build a few hundred tokens such as '俱乐部'.
    Qwen3.5's vocabulary is defined by ranks (tiktoken): a piece that is a token is that token, so
    the rule is applied here too, and gives the ids of tokenizer.json and of tiktoken."""
    for name, other in (("vocab.json", "merges.txt"), ("merges.txt", "vocab.json")):
        if kind_of(folder / name) is None:
            raise QwenError("{folder} has {have} but no {name}: the tokenizer needs both. Download them again.",
                            "{folder} 里有 {have} 却没有 {name}：分词器两个都需要。请重新下载。",
                            folder=folder, name=name, have=other)
    vocab = read_json(folder / "vocab.json")
    try:
        lines = read_small(folder / "merges.txt").decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise _bad_file(folder / "merges.txt", f"UTF-8 text (byte {e.start:,} is not)",
                        f"UTF-8 文本（第 {e.start:,} 字节不是）") from None
    merges = [tuple(line.split(" ", 1)) for line in lines if line and not line.startswith("#version")]
    special, config = {}, folder / "tokenizer_config.json"
    if kind_of(config) is not None:
        added = read_json(config)
        added = added.get("added_tokens_decoder", {}) if isinstance(added, dict) else None
        # ids as decimal digits that int() reads ('²' is a digit it does not), of a sensible length
        if not isinstance(added, dict) or not all(k.isdecimal() and len(k) <= 20 and isinstance(v, dict)
                                                  and _is_name(v.get("content")) for k, v in added.items()):
            raise _bad_file(config, "added_tokens_decoder: {\"id\": {\"content\": text}}",
                            "added_tokens_decoder：{\"编号\": {\"content\": 文字}}")
        special = {t["content"]: int(i) for i, t in added.items()}
    source = str(folder / "vocab.json")
    check_parts(vocab, merges, special, source)
    return cls(vocab, merges, special, ignore_merges=True, source=source)


def check_vocab(vocab, special, source):
    """Each id belongs to one token (else decoding it gives the other one), and all 256 byte symbols are
    tokens (else some text has no tokens)."""
    owner = {}                                                   # id -> the first token seen with it
    for symbols, i in [*vocab.items(), *((to_symbols(t), i) for t, i in special.items())]:
        if owner.setdefault(i, symbols) != symbols:               # a special token may be in the vocabulary, as itself
            raise QwenError("{src}: the id {i} belongs to two tokens, {a!r} and {b!r}; each token needs its "
                            "own id. " + DAMAGED[0], "{src}：编号 {i} 同时属于两个词元 {a!r} 和 {b!r}；每个词元需要"
                            "自己的编号。" + DAMAGED[1], src=source, i=i, a=owner[i], b=symbols)
    if missing := [c for c in BYTE_TO_CHAR.values() if c not in vocab]:
        raise _bad_file(source, f"a byte-level vocabulary holding all 256 byte symbols ({len(missing)} are missing, "
                        f"e.g. {missing[0]!r})", f"包含全部 256 个字节符号的字节级词表（缺 {len(missing)} 个，例如 {missing[0]!r}）")


def check_fits(tok, folder):
    """Every id must have a row in the embedding table, whose size config.json gives (when the folder
    has one): else the tokenizer and the weights belong to different models."""
    if kind_of(folder / "config.json") == "file":
        rows = Config.load(folder).vocab_size
        if tok.vocab_size > rows:
            raise QwenError("{src} has token ids up to {top:,}, but config.json's vocab_size is {rows:,}: the "
                            "embedding table has no row for them. The tokenizer and the weights belong to "
                            "different models; download them together again.",
                            "{src} 的词元编号最大到 {top:,}，但 config.json 的 vocab_size 是 {rows:,}：嵌入表里"
                            "没有它们的行。分词器和权重属于不同的模型；请一起重新下载。",
                            src=tok.source, top=tok.vocab_size - 1, rows=rows)


def check_tokenizer_json(data, file):
    """Everything qwen/tokenizer.py reads from tokenizer.json, of the kind it needs: one line naming
    the file, not a KeyError or a misread tokenizer of another family."""
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict):
        raise _bad_file(file, "a JSON object with a \"model\" object", "一个含 \"model\" 对象的 JSON 对象")
    if model.get("type") != "BPE" or model.get("byte_fallback") or not _is_byte_level(data):
        raise QwenError("{file} belongs to another model family ({kind}); Qwen3.5 uses byte-level BPE. "
                        "Is --model pointing at a Qwen3.5 folder?",
                        "{file} 属于别的模型家族（{kind}）；Qwen3.5 使用字节级 BPE。"
                        "--model 指向的是 Qwen3.5 的文件夹吗？", file=file, kind=_describe(model))
    merges, added = model.get("merges", []), data.get("added_tokens", [])
    if not isinstance(merges, list) or not all(isinstance(m, (str, list)) for m in merges):
        raise _bad_file(file, MERGES_EN, MERGES_ZH)
    if not isinstance(added, list) or not all(isinstance(a, dict) and _is_name(a.get("content"))
                                              and _is_id(a.get("id")) for a in added):
        raise _bad_file(file, "added_tokens: a list of {\"content\": text, \"id\": number}",
                        "added_tokens：由 {\"content\": 文字, \"id\": 编号} 组成的列表")
    _check_pattern(_split_pattern(data, file), file)
    _check_normalizer(data.get("normalizer"), file)
    pairs = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in merges]
    check_parts(model.get("vocab"), pairs, {a["content"]: a["id"] for a in added}, str(file))


def check_parts(vocab, merges, special, source):
    """The vocabulary maps symbols to whole-number ids of a sensible size; special tokens are not too
    many for one regex; each merge is two symbols whose join is in the vocabulary."""
    if not isinstance(vocab, dict) or set(map(type, vocab.values())) - {int} or min(vocab.values(), default=-1) < 0:
        raise _bad_file(source, "a vocabulary: an object of byte-level symbol -> id (a whole number)",
                        "一个词表：字节级符号 -> 编号（整数）的对象")
    if len(special) > MAX_SPECIAL_TOKENS:
        raise _bad_file(source, "at most {top:,} special tokens (it has {n:,}; Qwen3.5 has 33)".format(
                        top=MAX_SPECIAL_TOKENS, n=len(special)),
                        "最多 {top:,} 个特殊词元（它有 {n:,} 个；Qwen3.5 有 33 个）".format(top=MAX_SPECIAL_TOKENS, n=len(special)))
    for symbols, i in [*vocab.items(), *special.items()]:
        if i > MAX_TOKEN_ID:
            raise _bad_file(source, "ids from 0 to {top:,} (as config.json's vocab_size; {s!r} has {i:,})".format(
                            top=MAX_TOKEN_ID, s=symbols[:40], i=i),
                            "0 到 {top:,} 的编号（同 config.json 的 vocab_size；{s!r} 的编号是 {i:,}）".format(
                            top=MAX_TOKEN_ID, s=symbols[:40], i=i))
    try:
        for left, right in merges:
            if left + right not in vocab:
                raise QwenError("{src}: the merge {l!r} + {r!r} makes {t!r}, which is not in the vocabulary.",
                                "{src}：合并 {l!r} + {r!r} 得到 {t!r}，但它不在词表里。",
                                src=source, l=left, r=right, t=left + right)
    except (TypeError, ValueError):                               # not two strings
        raise _bad_file(source, MERGES_EN, MERGES_ZH) from None


def _check_pattern(pattern, file):
    try:
        regex.compile(pattern or "")
    except (regex.error, TypeError) as e:
        raise _bad_file(file, f"a valid split regex ({e})", f"合法的切分正则表达式（{e}）") from None


def _check_normalizer(normalizer, file):
    """NFC (alone or in a Sequence) or none; any other normalizer would change the text in ways the
    lesson's tokenizer does not reproduce, so it is refused rather than ignored."""
    if normalizer is None:
        return
    sequence = isinstance(normalizer, dict) and normalizer.get("type") == "Sequence"
    steps = normalizer.get("normalizers") if sequence else [normalizer]
    for step in steps if isinstance(steps, list) else [steps]:
        kind = step.get("type") if isinstance(step, dict) else step
        if kind != "NFC":
            raise QwenError("{file}: its normalizer {kind} is not supported; this course applies NFC or nothing "
                            "(Qwen3.5's is NFC). Use Qwen3.5's tokenizer.json.",
                            "{file}：它的归一化器（normalizer）{kind} 不受支持；本课程只做 NFC 或不做归一化（Qwen3.5 用的是 NFC）。"
                            "请使用 Qwen3.5 的 tokenizer.json。", file=file, kind=str(kind)[:40])


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
            if not isinstance(pattern, dict) or not isinstance(pattern.get("Regex"), str):
                raise _bad_file(file, "pre_tokenizer: a Split with a {\"Regex\": text} pattern",
                                "pre_tokenizer：带 {\"Regex\": 文字} 模式的 Split")
            return pattern["Regex"]
    return None


def _is_byte_level(data):
    return '"ByteLevel"' in json.dumps([data.get("pre_tokenizer"), data.get("decoder")])


def _describe(model):
    if model.get("type") != "BPE":
        return f"a {model.get('type')} model"
    if model.get("byte_fallback"):
        return "SentencePiece-style BPE with byte fallback"
    return "BPE without the byte-level alphabet"


def _is_name(x):
    """A special token's text: not empty, and UTF-8 (JSON's \\ud800 is a lone surrogate, with no bytes)."""
    return isinstance(x, str) and x != "" and _SURROGATE.search(x) is None


def _is_id(x):
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _bad_file(file, wanted_en, wanted_zh):
    return QwenError("{file} is not a usable tokenizer file: it should hold {wanted}. It is damaged or not Qwen3.5's; "
                     "download it again.", "{file} 不是可用的分词器文件：它应当包含{wanted_zh}。文件损坏或不是 Qwen3.5 的；"
                     "请重新下载。", file=file, wanted=wanted_en, wanted_zh=wanted_zh)
