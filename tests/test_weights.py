"""The loader on checkpoints written in the real format: layouts, laziness, strict loading."""
import json
import os
from pathlib import Path

import pytest
import torch

from conftest import MANIFEST
from qwen.lang import QwenError
from engine.shapes import language_model_shapes
from engine.tiny import REAL_SHARD_NAME, tiny_config, tiny_tensors, write_tiny
from qwen.files import INDEX_NAME
from qwen.config import Config
from qwen.weights import load, load_weights, read_header, short_name


def test_shape_rules_reproduce_the_real_checkpoint():
    """The 320 language-model tensors of Qwen3.5-0.8B: names, shapes and dtypes, all of them."""
    manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
    real = {short_name(k): (tuple(v["shape"]), v["dtype"]) for k, v in manifest["tensors"].items()
            if k.startswith("model.language_model.")}
    assert language_model_shapes(Config.from_dict(manifest["config"])) == real


def test_tiny_checkpoint_is_in_the_real_format(tiny_path):
    files = sorted(p.name for p in tiny_path.iterdir())
    assert files == sorted(["config.json", REAL_SHARD_NAME, INDEX_NAME, "tokenizer.json", "tokenizer_config.json",
                            "chat_template.jinja", "preprocessor_config.json"])
    config = json.loads((tiny_path / "config.json").read_text(encoding="utf-8"))
    assert "text_config" in config and "hidden_size" not in config       # nested, like the real one
    index = json.loads((tiny_path / INDEX_NAME).read_text(encoding="utf-8"))
    assert set(index["weight_map"].values()) == {REAL_SHARD_NAME}
    header, metadata = read_header(tiny_path / REAL_SHARD_NAME)
    assert metadata is None
    assert index["metadata"]["total_size"] == sum(i.nbytes for i in header.values())
    names = list(header)
    assert any(n.startswith("model.visual.") for n in names) and any(n.startswith("mtp.") for n in names)
    assert not any(n == "lm_head.weight" or n.endswith(".bias") and "language_model" in n for n in names)
    fp32 = sorted({n.rsplit(".layers.", 1)[-1].split(".", 1)[1] for n, i in header.items() if i.dtype == "F32"})
    assert fp32 == ["linear_attn.A_log", "linear_attn.norm.weight"]
    cfg = Config.load(tiny_path)
    assert 4 <= cfg.num_hidden_layers <= 8 and cfg.head_dim != cfg.hidden_size // cfg.num_attention_heads
    assert all((t == "full_attention") == ((i + 1) % 4 == 0) for i, t in enumerate(cfg.layer_types))
    weights = sum(p.stat().st_size for p in tiny_path.glob("*.safetensors"))
    assert weights < 10_000_000                                      # a few MB; the vocabulary is real


def test_tiny_checkpoint_is_deterministic(tmp_path):
    a, b = write_tiny(tmp_path / "a"), write_tiny(tmp_path / "b")
    for name in ("config.json", REAL_SHARD_NAME, INDEX_NAME):
        assert (a / name).read_bytes() == (b / name).read_bytes()


def _at_once(fn, n=2):
    """fn() in n threads started together; their results. Threads stand in for processes here: the lock is
    fcntl.flock on a file opened by each caller, and two opens exclude each other as two processes do."""
    import threading
    got, start = [], threading.Barrier(n)

    def call():
        start.wait()
        got.append(fn())
    threads = [threading.Thread(target=call) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return got


@pytest.mark.skipif(os.name != "posix", reason="the lock is fcntl's (elsewhere each caller builds its own copy)")
def test_two_callers_at_once_build_the_tiny_checkpoint_once(tmp_path, monkeypatch):
    """The test suite's controller builds it while the workers start, which then wait for it instead of
    building it again (the real tokenizer's merges: ~10 s of CPU); two notebooks opened at once, likewise."""
    import time
    from engine import tiny
    monkeypatch.setenv("QWEN_CACHE", str(tmp_path / "cache"))
    built = []

    def slow_write_tiny(folder):                      # write_tiny's slow part is the tokenizer; its files here
        built.append(folder)
        time.sleep(0.3)
        for name in ("config.json", INDEX_NAME):
            (Path(folder) / name).write_text("{}", encoding="utf-8")
        return folder

    monkeypatch.setattr(tiny, "write_tiny", slow_write_tiny)
    got = _at_once(tiny.tiny_model_path)
    assert len(built) == 1 and len(got) == 2 and got[0] == got[1] and (got[0] / INDEX_NAME).is_file()


@pytest.mark.skipif(os.name != "posix", reason="the lock is fcntl's (elsewhere each caller builds its own copy)")
def test_two_callers_at_once_build_the_tokenizer_json_once(tmp_path, monkeypatch):
    """tokenizer_json_path is asked for by the tiny checkpoint and by the checkpoints transformers writes
    (tests/helpers.py), possibly at the same time: the merges are derived once."""
    import time
    from engine import tiny
    monkeypatch.setenv("QWEN_CACHE", str(tmp_path / "cache"))
    read = []

    def slow_ranks():
        read.append(1)
        time.sleep(0.3)
        return {bytes([b]): b for b in range(256)}

    monkeypatch.setattr(tiny, "qwen_ranks", slow_ranks)
    got = _at_once(tiny.tokenizer_json_path)
    assert len(read) == 1 and len(got) == 2 and got[0] == got[1]
    assert len(json.loads(got[0].read_text(encoding="utf-8"))["model"]["vocab"]) == 256


def test_tiny_norms_make_a_missing_one_plus_or_a_swap_visible():
    t = tiny_tensors()
    inp = t["model.language_model.layers.0.input_layernorm.weight"].float()
    post = t["model.language_model.layers.0.post_attention_layernorm.weight"].float()
    final = t["model.language_model.norm.weight"].float()
    assert inp.abs().min() > 0.05 and (inp - post).abs().min() > 0.3 and final.min() > 1.5


LAYOUTS = [  # (key layout, shards, index, shard file name)
    ("multimodal", 1, True, REAL_SHARD_NAME),   # the real 0.8B layout
    ("multimodal", 1, False, REAL_SHARD_NAME),  # the odd name, no index: found by *.safetensors
    ("multimodal", 1, False, "model.safetensors"),
    ("multimodal", 3, True, None),              # model-0000i-of-00003.safetensors + index
    ("multimodal", 3, False, None),
    ("text", 1, True, "model.safetensors"),     # text-only export: model.* keys, flat config
    ("text", 2, True, None),
]


@pytest.mark.parametrize("layout, shards, index, shard_name", LAYOUTS)
def test_loader_reads_every_layout(tmp_path, layout, shards, index, shard_name):
    from engine.tiny import write_checkpoint
    expected = tiny_tensors(layout)
    kwargs = {"shard_name": shard_name} if shard_name else {}
    write_checkpoint(tmp_path, expected, tiny_config(layout), shards=shards, index=index, **kwargs)
    assert len(list(tmp_path.glob("*.safetensors"))) == shards
    W = load_weights(tmp_path)
    cfg = Config.load(tmp_path)
    assert set(W) == set(language_model_shapes(cfg))                  # short names, LM only
    prefix = "model.language_model." if layout == "multimodal" else "model."
    for short in W:
        got, want = W[short], expected[prefix + short]
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want), short
        assert torch.equal(W[prefix + short], want)                   # the full name works too
    assert W["layers.0.linear_attn.A_log"].dtype == torch.float32
    assert W["layers.0.input_layernorm.weight"].dtype == torch.bfloat16
    hidden = [n for n in W.all_names if n.startswith(("model.visual.", "mtp."))]
    assert (len(hidden) > 0) == (layout == "multimodal")
    for n in hidden:
        assert n not in set(W) and n in W and torch.equal(W[n], expected[n])


def test_shape_and_dtype_without_reading(tiny_path):
    W = load_weights(tiny_path)
    info = W.info("embed_tokens.weight")
    assert info.shape == (248320, 16) and info.dtype == "BF16" and info.nbytes == 248320 * 16 * 2
    assert W.shape("norm.weight") == (16,) and W.dtype("layers.0.linear_attn.norm.weight") == torch.float32
    assert W._maps == {}                                              # nothing mapped, nothing read


def _mapped_kb(file):
    """Resident kilobytes of this process's mappings of `file` (Linux /proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if "-" in line.split(" ", 1)[0] and len(line.split()) >= 5:   # a mapping's header line
            inside = line.split()[-1] == str(file)
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc/self/smaps")
def test_reading_the_norms_does_not_read_the_embedding_table(tmp_path):
    folder = write_tiny(tmp_path)
    file = folder / REAL_SHARD_NAME
    W = load_weights(folder)
    norms = [n for n in W if n.split(".")[-2].endswith("norm")]
    assert len(norms) == 8 * 2 + 1 + 2 * 2 + 6                       # input/post, final, q/k, gated
    total = sum(W[n].float().sum().item() for n in norms)            # read every norm weight
    table = W.info("embed_tokens.weight").nbytes
    after_norms = _mapped_kb(file) * 1024
    assert 0 < after_norms < table / 8, (after_norms, table)          # a few pages, not 7.9 MB
    W["embed_tokens.weight"].float().sum()                           # now really read the table
    assert _mapped_kb(file) * 1024 > table * 0.9
    assert total == total                                            # values were real numbers


def test_data_is_read_when_accessed_not_when_opened(tmp_path):
    """Damage the table's bytes after load_weights(): the norms are intact, the table shows it (its NaNs
    are one line naming it, when it is read)."""
    folder = write_tiny(tmp_path)
    W = load_weights(folder)
    info = W.info("embed_tokens.weight")
    before = os.stat(info.file)
    with open(info.file, "r+b") as f:                                # 0xFFFF is a NaN in bf16
        f.seek(info.offset)
        f.write(b"\xff" * info.nbytes)
    os.utime(info.file, ns=(before.st_atime_ns, before.st_mtime_ns))  # else W refuses the changed file
    expected = tiny_tensors()
    for n in ("norm.weight", "layers.0.input_layernorm.weight", "layers.3.self_attn.q_norm.weight"):
        assert torch.equal(W[n], expected["model.language_model." + n])
    with pytest.raises(QwenError, match=r"embed_tokens\.weight\[0, 0\] is nan"):
        W["embed_tokens.weight"]


def test_tensors_are_private_copies_of_the_file(tiny_path):
    W = load_weights(tiny_path)
    before = (tiny_path / REAL_SHARD_NAME).read_bytes()
    W["norm.weight"].zero_()                                         # a learner's in-place edit
    assert (tiny_path / REAL_SHARD_NAME).read_bytes() == before


# ------------------------------------------------------------------------------ load()

class Norm(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(dim))


def test_load_fills_and_keeps_the_stored_dtype(tiny_path):
    W = load_weights(tiny_path)
    m = load(Norm(16), W, "layers.2.input_layernorm.")
    assert isinstance(m, Norm) and m.weight.dtype == torch.bfloat16
    assert torch.equal(m.weight.detach(), W["layers.2.input_layernorm.weight"])
    assert isinstance(m.weight, torch.nn.Parameter)
    m2 = load(Norm(16), W, "model.language_model.norm")             # full names, prefix without dot
    assert torch.equal(m2.weight.detach(), W["norm.weight"])


def test_load_shape_mismatch_names_key_and_both_shapes(tiny_path):
    with pytest.raises(QwenError) as e:
        load(Norm(1024), load_weights(tiny_path), "layers.0.input_layernorm.")
    msg = str(e.value)
    assert "layers.0.input_layernorm.weight" in msg and "[1024]" in msg and "[16]" in msg


def test_load_missing_key(tiny_path):
    m = Norm(16)
    m.bias = torch.nn.Parameter(torch.zeros(16))
    with pytest.raises(QwenError, match=r"layers\.0\.input_layernorm\.bias"):
        load(m, load_weights(tiny_path), "layers.0.input_layernorm.")


def test_load_unexpected_key(tiny_path):
    class Empty(torch.nn.Module):
        pass
    with pytest.raises(QwenError, match=r"Unexpected key layers\.0\.input_layernorm\.weight"):
        load(Empty(), load_weights(tiny_path), "layers.0.input_layernorm.")


def test_load_does_not_confuse_layer_1_with_layer_10(tmp_path):
    from engine.tiny import write_checkpoint
    t = {"model.language_model.layers.1.norm.weight": torch.ones(4, dtype=torch.bfloat16),
         "model.language_model.layers.10.norm.weight": torch.zeros(4, dtype=torch.bfloat16)}
    write_checkpoint(tmp_path, t, tiny_config())
    m = load(Norm(4), load_weights(tmp_path), "layers.1.norm")
    assert m.weight.float().sum() == 4


def test_rows_reads_just_those_rows(tiny_path):
    W = load_weights(tiny_path)
    ids = [9419, 0, 248319, 5, 5]
    got = W.rows("embed_tokens.weight", ids)
    assert got.dtype == torch.bfloat16 and got.shape == (5, 16)
    assert torch.equal(got, W["embed_tokens.weight"][ids])
    assert W.rows("layers.0.mlp.down_proj.weight", torch.tensor([3])).shape == (1, 48)
    assert W.rows("embed_tokens.weight", []).shape == (0, 16)
    with pytest.raises(QwenError, match=r"Row 248320 is outside embed_tokens.weight \(rows 0..248319\)"):
        W.rows("embed_tokens.weight", [1, 248320])
