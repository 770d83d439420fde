"""The chapter scripts and main.py, run end to end as a learner would (offline).

Each whole-course run is one process (main.py runs every chapter in it), shared by the tests of
its output, so the suite stays fast.
"""
import ast
import os
import re
import unicodedata

import pytest
import torch

from conftest import ROOT, TRANSFORMERS_CHECKPOINTS
from helpers import chinese_text_problems

BANNER = "BUILT-IN TINY CHECKPOINT"


def width(text):
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def section_of(out, title):
    """The lines of one section: from its title to the next blank line, without the line that says where
    a figure was written (course_zh runs with --plot: engine/plots.py's 'wrote PATH' ends a section)."""
    start = out.index(title)
    lines = out[start:out.index("\n\n", start)].splitlines()
    return [line for line in lines if not re.match(r"  (wrote|已写出) \S+\.png$", line)]


# ---------------------------------------------------------------- the tiny checkpoint, in English

def test_falls_back_to_the_tiny_checkpoint_with_one_banner(course_en):
    said = [line for line in course_en.splitlines() if "Qwen/Qwen3.5-0.8B is not in the Hugging Face cache" in line]
    assert len(said) == 1 and "using the built-in tiny checkpoint" in said[0]      # one line, once
    assert course_en.count(BANNER) == 1 and course_en.index(BANNER) < course_en.index("# ch01_weights.py")
    assert "Real: token ids (Qwen3.5's vocabulary), lines labelled Qwen3.5-0.8B." in course_en
    from main import TRAINING_CHAPTERS, chapters
    assert _done(course_en) == [n for n in chapters() if n not in TRAINING_CHAPTERS]
    assert "(the built-in tiny checkpoint: made-up numbers)" in course_en


def _floats(text):
    """The numbers of a printed list: '[0.3651, -1.0, 2e-05]' -> [0.3651, -1.0, 2e-05]."""
    return [float(v) for v in re.findall(r"-?[\d.]+(?:e[+-]?\d+)?", text)]


def _ints(text):
    """'248,044' -> 248044."""
    return int(text.replace(",", ""))


NUMBER = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?(?:e[+-]?\d+)?(?![\d.]*[A-Za-wyz_])")   # not in Qwen3.5-0.8B, fp32


def _numbers(line):
    """Every number of a printed line, in order, whatever words are around them:
    'grid (t, h, w) = (1, 24, 24), 1,024 ids, 2.5 ms' -> [1, 24, 24, 1024, 2.5] (ints where whole)."""
    values = [float(v.replace(",", "")) for v in NUMBER.findall(line)]
    return [int(v) if v.is_integer() else v for v in values]


def _line(out, key):
    """The one printed line that holds key (an identifier, a shape, a label of a number)."""
    lines = [line for line in out.splitlines() if key in line]
    assert len(lines) == 1, (key, lines)
    return lines[0]


def _done(out):
    """The chapters main.py's last line says it ran ('Done: chapter(s) 1, 2, 3 on PATH ...')."""
    return [int(n) for n in re.findall(r"\d+", re.search(r"Done: chapter\(s\) ([\d, ]+)", out)[1])]


def _stops(out, script):
    """The one line a chapter says before it stops (after its title and where its code is), checked to
    be all it printed: no numbered section."""
    text = _chapter(out, script)
    after = text[re.search(r"qwen/\w+\.py:\d+.*\n", text).end():]              # the line that says where its code is
    lines = [line for line in after.splitlines() if line.strip() and not line.startswith("#")]
    assert len(lines) == 1 and not re.match(r"\d+\. ", lines[0]), (script, lines)
    return lines[0]


def _exercises_of(n):
    """The ids of the exercises that chapter n teaches (practice/_judge/exercises, their taught_in)."""
    from practice._judge.exercises import EXERCISES
    return sorted(int(e.id) for e in EXERCISES if e.taught_in == n)


def _exercises_said(out):
    """The exercise ids a chapter's last lines name ('Exercises for this chapter: 240, 241. Next: ...')."""
    return [int(i) for i in re.findall(r"\d+", re.search(r"Exercises? for this chapter: ([\d, ]+)", out)[1])]


def _merge_order(h, w, m):
    """The grid cell (row, column) of each patch in merge-block order (qwen/image.py's patchify):
    the m x m patches of each block one after the other, blocks left to right, then down."""
    return [(br * m + i, bc * m + j) for br in range(h // m) for bc in range(w // m) for i in range(m) for j in range(m)]


_NAMED = {}


def _named(n):
    """The values chapter n named in course_en's run (conftest.course_namespaces), read once per process."""
    from conftest import COURSE_EN, course_namespaces
    if not _NAMED:
        _NAMED.update(course_namespaces(*COURSE_EN))
    return _NAMED[n]


def _header(folder):
    """The JSON header of the checkpoint's one safetensors file, read here by hand."""
    import json
    (file,) = folder.glob("*.safetensors")
    with open(file, "rb") as f:
        return json.loads(f.read(int.from_bytes(f.read(8), "little")))


def _manifest():
    import json
    from conftest import MANIFEST
    return json.loads(MANIFEST.read_text(encoding="utf-8"))


def test_ch01(course_en, tiny_path):
    import math
    from qwen.config import Config
    out, named = _chapter(course_en, "ch01_weights.py"), _named(1)
    cfg, header = Config.load(tiny_path), _header(tiny_path)
    (file,) = tiny_path.glob("*.safetensors")
    with open(file, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
    assert _ints(re.search(r"header length n = ([\d,]+) bytes", out)[1]) == n == named["n"]
    bytes_at = re.search(r"its bytes: ([\d,]+) \.\. ([\d,]+) of the file; qwen\.weights says offset ([\d,]+), ([\d,]+) bytes", out)
    a, b, offset, k = map(_ints, bytes_at.groups())                   # hand-read header == library
    begin, end = header[next(name for name in header if name.endswith("language_model.norm.weight"))]["data_offsets"]
    assert (a, b) == (8 + n + begin, 8 + n + end) and (offset, k) == (a, b - a) and named["same"] is True
    assert file.name in out                                                       # the file it reads, by name
    pattern = " ".join("F" if t == "full_attention" else "L" for t in cfg.layer_types)
    assert re.search(r"\n  ([LF ]+)\n", out)[1] == pattern
    f32 = sorted(name for name, t in header.items() if name != "__metadata__" and t["dtype"] == "F32")
    assert int(re.search(r"F32 +(\d+) tensors", out)[1]) == len(f32) and "linear_attn.A_log, linear_attn.norm.weight" in out
    from engine.shapes import language_model_shapes
    assert int(re.search(r"the language model the course builds: (\d+) tensors", out)[1]) == len(language_model_shapes(cfg))
    head_dim = re.search(r"head_dim +(\d+) +per head, set on its own \(hidden_size / heads = (\d+)\)", out)
    assert (int(head_dim[1]), int(head_dim[2])) == (cfg.head_dim, cfg.hidden_size // cfg.num_attention_heads)
    assert int(re.search(r"L = linear attention: (\d+) layers", out)[1]) == cfg.layer_types.count("linear_attention")
    full = re.search(r"F = full attention: (\d+) layers \(([\d, ]+)\)", out)
    assert int(full[1]) == len(cfg.full_attention_layers) and _floats(full[2]) == list(cfg.full_attention_layers)
    row = re.search(r"embed_tokens\.weight\[(\d+)\]\[:4\] = (\[[^\]]+\]) \(the row of the token 'Hello', id from tokenizer\.json\)", out)
    from qwen.tokenizer import Tokenizer
    from safetensors.torch import load_file
    E = next(t for name, t in load_file(file).items() if name.endswith("embed_tokens.weight"))
    assert Tokenizer.load(tiny_path).encode("Hello") == [int(row[1])]
    assert torch.allclose(torch.tensor(_floats(row[2])), E[int(row[1]), :4].float(), atol=1e-4)
    assert float(re.search(r"about ([\d.]+) decimal digits", out)[1]) == round(8 * math.log10(2), 1)
    gaps = re.search(r"gap above 1: ([\d.]+) \(2\^(-\d+)\); below 1: ([\d.]+) \(2\^(-\d+)\)", out)
    one = torch.tensor(1.0, dtype=torch.bfloat16)
    above = (torch.nextafter(one, torch.tensor(2.0, dtype=torch.bfloat16)) - one).item()
    below = (one - torch.nextafter(one, torch.tensor(0.0, dtype=torch.bfloat16))).item()
    assert (float(gaps[1]), float(gaps[3])) == (above, below) and (2.0 ** int(gaps[2]), 2.0 ** int(gaps[4])) == (above, below)
    stored = [(float(v), float(b)) for v, b in re.findall(r"([\d.]+) stored in bf16 becomes (\S+)", out)]
    for v, b in stored:
        assert b == torch.tensor(v).bfloat16().item(), v
    assert any(1 < v < 1 + above / 2 and b == 1.0 for v, b in stored), stored      # an update too small for bf16: lost
    # Qwen3.5-0.8B's figures, from its published inventory, labelled
    real = _manifest()
    files = re.search(r"Qwen3\.5-0\.8B: (\d+) files, ([\d.]+) GB; the weights: (\S+) \(([\d.]+) GB\)", out)
    weights = max(real["files"], key=lambda f: f["size"])
    assert int(files[1]) == len(real["files"]) and files[3] == weights["name"]
    assert float(files[2]) == round(sum(f["size"] for f in real["files"]) / 1e9, 2) and float(files[4]) == round(weights["size"] / 1e9, 2)
    entries = re.search(r"Qwen3\.5-0\.8B: (\d+) entries, n = ([\d,]+) bytes \((\d+) of them padding\)", out)
    st = real["safetensors"]
    assert (int(entries[1]), _ints(entries[2]), int(entries[3])) == (
        len(real["tensors"]), st["header_json_bytes"] + st["header_padding_bytes"], st["header_padding_bytes"])
    table = section_of(out, "  Qwen3.5-0.8B (its published inventory):")
    lm = [name for name in real["tensors"] if not name.startswith(("model.visual.", "mtp."))]
    for label, k in (("norms (chapter 3)", sum(name.endswith("norm.weight") for name in lm)),
                     ("vision tower (used in chapter 10)", sum(name.startswith("model.visual.") for name in real["tensors"])),
                     ("multi-token prediction (chapter 12)", sum(name.startswith("mtp.") for name in real["tensors"]))):
        rows = [line for line in table if line.strip().startswith(label)]
        assert len(rows) == 1 and int(rows[0][len("  ") + len(label):].split()[0]) == k, (label, k, rows)


def test_ch02(course_en, tiny_path):
    from qwen.config import Config
    from qwen.tokenizer import Tokenizer
    out, named = _chapter(course_en, "ch02_embedding.py"), _named(2)
    cfg, tok = Config.load(tiny_path), Tokenizer.load(tiny_path)
    ids = tok.encode(named["text"])
    table = section_of(out, "1. From text to token ids")[3:]
    shown = [int(i) for line in table if line.startswith("  '") for i in re.findall(r"(?:^|, )(\d+) '", line.split("   ")[-1].strip())]
    assert named["ids"] == ids == shown and tok.decode([ids[3]]) == "毕"            # each token's id, as the tokenizer gives it
    assert re.search(r"(?:^| )9419 '(\S+)'", out)[1] == tok.decode([9419])
    assert re.search(r"decode\(encode\(text\)\) == text: (\w+)", out)[1] == str(tok.decode(ids) == named["text"]) == "True"
    utf8 = re.search(r"UTF-8 bytes: '毕' (\d+), '𠀀' (\d+)", out)
    assert (int(utf8[1]), int(utf8[2])) == (len("毕".encode()), len("𠀀".encode()))
    counts = re.search(r"([\d,]+) BPE tokens \+ (\d+) special tokens = ([\d,]+) ids", out)
    bpe, special, total = _ints(counts[1]), int(counts[2]), _ints(counts[3])
    assert (bpe, special, total) == (min(tok.special.values()), len(tok.special), tok.vocab_size) and bpe + special == total
    unused = re.search(r"rows ([\d,]+)\.\.([\d,]+) \((\d+)\) belong to no token; ([\d,]+) = 256 x (\d+)\n", out)
    assert _ints(unused[1]) == total and _ints(unused[2]) == cfg.vocab_size - 1 and int(unused[3]) == cfg.vocab_size - total
    assert _ints(unused[4]) == cfg.vocab_size == 256 * int(unused[5])
    shape = re.search(r"embed\((\d+) ids\) -> shape \[(\d+), (\d+)\]", out)
    assert int(shape[1]) == int(shape[2]) == len(ids) and int(shape[3]) == cfg.hidden_size
    real = _manifest()["tensors"]
    embed = next(t for name, t in real.items() if name.endswith("embed_tokens.weight"))
    real_line = re.search(r"Qwen3\.5-0\.8B: shape \[(\d+), (\d+)\], BF16: ([\d.]+) MB on disk", out)
    assert [int(real_line[1]), int(real_line[2])] == embed["shape"] and embed["dtype"] == "BF16"
    assert float(real_line[3]) == round(embed["shape"][0] * embed["shape"][1] * 2 / 1e6, 1)
    assert "(tiny checkpoint: random rows; these neighbours mean nothing)" in out
    sharp = [(float(p), float(e)) for p, e in re.findall(r"top probability ([\d.e-]+) +entropy (-?[\d.]+) nats", out)]
    assert len(sharp) == 5 and sharp[0][0] < 0.01 < sharp[-1][0] and sharp[0][1] > 12 > 2 > sharp[-1][1]
    assert all(e >= 0 for _, e in sharp) and "entropy -0.00" not in out
    assert all(p > 0 for p, _ in sharp), sharp                           # a flat distribution's 1/vocab, not 0.000
    second = re.search(r"at RMS\(h\) = \S+ the two largest logits differ by ([\d.]+): the second gets (\d+)% "
                       r"of the first's probability", out)
    r = torch.exp(-torch.tensor(float(second[1]))).item()
    assert abs(float(second[2]) / 100 - r) < 0.02 and sharp[-1][0] <= 1 / (1 + r) + 0.01   # why the top stalls


def test_ch03(course_en, tiny_path):
    import torch.nn.functional as F
    from engine.known import CH03
    from qwen.config import Config
    out, named = _chapter(course_en, "ch03_norm.py"), _named(3)
    cfg, eps = Config.load(tiny_path), Config.load(tiny_path).rms_norm_eps
    rms = lambda t: t.pow(2).mean(-1).sqrt()
    first = re.search(r"RMS before: (\[[^\]]+\]); after RMSNorm with w = 0: (\[[^\]]+\])", out)
    x = named["x"]
    assert _floats(first[1]) == [round(v, 2) for v in rms(x).flatten()[:3].tolist()]
    assert _floats(first[2]) == [round(v, 2) for v in rms(x / (rms(x)[..., None] ** 2 + eps).sqrt()).flatten()[:3].tolist()] == [1.0] * 3
    four = re.search(r"\[1, 2, 3, 4\] / sqrt\(7\.5\) = (\[[^\]]+\]); RMSNorm\(4\) gives (\[[^\]]+\])", out)
    v = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert _floats(four[1]) == _floats(four[2]) == [round(e, 4) for e in (v / 7.5 ** 0.5).tolist()]
    small = torch.full((4,), 1e-3)
    eps_at = re.search(r"eps inside the root -> RMS ([\d.]+); outside \(the article's formula\) -> ([\d.]+)", out)
    assert float(eps_at[1]) == round(rms(small / (rms(small) ** 2 + eps).sqrt()).item(), 3)           # 0.707
    assert float(eps_at[2]) == round(rms(small / (rms(small) + eps)).item(), 3)                        # 0.999
    gaps = {float(a): float(g) for a, g in re.findall(r"next bf16 number above ([\d.e-]+): ([\d.e-]+) away", out)}
    for a, gap in gaps.items():
        b = torch.tensor(a).bfloat16()
        up = (torch.nextafter(b, torch.tensor(2.0, dtype=torch.bfloat16)) - b).item()
        assert gap == float(f"{up:.3g}"), (a, gap, up)
    assert 1.0 in gaps and any(abs(a - 0.000999451) < 1e-9 for a in gaps)      # 2^-17 above 0.000999451, not 0.001 * 2^-7
    recorded = re.search(r"Qwen3\.5-0\.8B \(recorded\): norm\.weight mean ([+-][\d.]+), range \[([+-][\d.]+), ([+-][\d.]+)\]", out)
    assert tuple(map(float, recorded.groups())) == (CH03["final_w"]["mean"], CH03["final_w"]["min"], CH03["final_w"]["max"])
    xb, wq = named["xb"], named["wq"]
    exact = F.rms_norm(xb.float(), (cfg.hidden_size,), weight=1 + wq.float(), eps=eps).bfloat16()
    share = (exact != named["yb"]).float().mean().item()
    assert int(re.search(r"F\.rms_norm in fp32, 1 \+ w\.float\(\) (\d+)%", out)[1]) == round(100 * share) == 0
    gate0 = re.search(r"gate = \+0: output RMS ([\d.]+) \(silu = (-?[\d.]+)\)", out)
    assert float(gate0[1]) == 0 and float(gate0[2]) == F.silu(torch.tensor(0.0)).item() == 0      # silu(0) = 0 closes it
    lengths = _floats(re.search(r"lengths after l2norm: (\[[^\]]+\])", out)[1])
    assert lengths == [round(e, 3) for e in (x / x.norm(dim=-1, keepdim=True)).norm(dim=-1).flatten()[:3].tolist()] == [1.0] * 3
    pre = re.search(r"Pre-Norm : stream RMS after layers 1/12/24 = ([\d.]+)/([\d.]+)/([\d.]+); "
                    r"cosine with the input ([\d.]+)/([\d.]+)/([\d.]+)", out)
    post = re.search(r"Post-Norm: stream RMS after layers 1/12/24 = 1.00/1.00/1.00; cosine with the input "
                     r"[\d.]+/(-?[\d.]+)/(-?[\d.]+)", out)
    assert pre and post and float(pre[3]) > 3 * float(pre[1]) and float(pre[6]) > 0.1 > abs(float(post[2]))
    norms = re.search(r"language model: (\d+) residual-stream RMSNorms \+ (\d+) q/k RMSNorms \+ (\d+) gated RMSNorms = (\d+)", out)
    n_lin, n_full = cfg.layer_types.count("linear_attention"), cfg.layer_types.count("full_attention")
    expected = (2 * cfg.num_hidden_layers + 1, 2 * n_full, n_lin)     # 2 per layer + the final; q and k; 1 per linear layer
    assert tuple(map(int, norms.groups())) == (*expected, sum(expected))
    def norm_count(names, prefix):                        # input_layernorm, q_norm, norm1, pre_fc_norm_hidden, ...
        return sum(n.startswith(prefix) and re.search(r"norm[^.]*\.weight$", n) is not None for n in names)
    header, real = _header(tiny_path), _manifest()["tensors"]
    assert int(re.search(r"vision tower: (\d+) LayerNorms \(chapter 10\)", out)[1]) == norm_count(header, "model.visual.")
    assert int(re.search(r"MTP head: (\d+) RMSNorms \(chapter 12\)", out)[1]) == norm_count(header, "mtp.")
    published = re.search(r"Qwen3\.5-0\.8B \(published inventory\): (\d+) in the language model; (\d+) LayerNorms in the "
                          r"vision tower; (\d+) RMSNorms in the MTP head", out)
    lm = [name for name in real if not name.startswith(("model.visual.", "mtp."))]
    assert tuple(map(int, published.groups())) == (norm_count(lm, ""), norm_count(real, "model.visual."), norm_count(real, "mtp."))


def test_no_real_over_made_up_numbers(course_en):
    for line in course_en.splitlines():
        assert "learned" not in line or "Qwen3.5-0.8B" in line, line       # the tiny checkpoint learned nothing
        if re.search(r"\breal\b", line, re.I):
            assert "Qwen3.5-0.8B" in line or "For the real model" in line or "real Qwen3.5 file format" in line \
                or "follow the real rules" in line, line


def test_plurals(course_en):
    assert not re.search(r"\b1 (layers|tensors|files)\b", course_en) and "(1x worse)" not in course_en


# ---------------------------------------------------------------- Chinese

def test_chinese_output(course_zh):
    out = course_zh
    assert out.count("内置小检查点") == 2 and "手工读取 safetensors 文件头" in out          # banner + the "Done" line
    assert "Reading a safetensors header" not in out and "Pre-Norm" not in out
    for term in ("层归一化", "均方根归一化", "升到 fp32", "前置归一化", "带门的 RMSNorm"):
        assert term in out, term
    assert all("学到" not in line or "Qwen3.5-0.8B" in line for line in out.splitlines())   # made-up, not learned


def test_chinese_punctuation(course_zh):
    """TERMINOLOGY.md's rules for Chinese text: punctuation, lists, no word-for-word 是, no English
    words, RMS and 提示词 (tests/test_text.py shows that each kind is caught)."""
    bad = chinese_text_problems(course_zh)
    assert not bad, bad[:5]
    assert not re.search(r"\d; ", course_zh) and "2 层（3、7）" in course_zh    # lists between numbers too


def test_tables_align_by_display_width(course_zh):
    ch01 = section_of(course_zh, "4. 张量清单")[2:-1]                # the header and group rows
    assert len(ch01) >= 5 and len({width(line) for line in ch01[:7]}) == 1, ch01
    ch02 = section_of(course_zh, "1. 从文字到词元编号")[3:9]          # header + rows: where the tokens column starts
    starts = {width(line[:re.search(r" (\d+ '|词元（)", line).start() + 1]) for line in ch02}
    assert len(starts) == 1, ch02


# ---------------------------------------------------------------- other checkpoints

@pytest.fixture(scope="module")
def courses_on_transformers_checkpoints(transformers_checkpoints):
    """The whole course (main.py --model FOLDER --max-new-tokens 4) on each of conftest's
    transformers-written checkpoints, run in course_en's process after that course, once per session
    (conftest.run_courses_on_checkpoints)."""
    from conftest import run_courses_on_checkpoints
    return run_courses_on_checkpoints()


@pytest.mark.timeout(360)                    # the first one runs course_en and all three courses
@pytest.mark.parametrize("name", TRANSFORMERS_CHECKPOINTS)
def test_every_chapter_runs_on_checkpoints_written_by_transformers(courses_on_transformers_checkpoints,
                                                                  transformers_checkpoints, name):
    import json
    import math
    from main import TRAINING_CHAPTERS, chapters
    layout, big = TRANSFORMERS_CHECKPOINTS[name]["layout"], TRANSFORMERS_CHECKPOINTS[name]["tied"]
    folder = transformers_checkpoints[name]
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    text = config.get("text_config", config)
    header = {k: t for k, t in _header(folder).items() if k != "__metadata__"}
    r = courses_on_transformers_checkpoints[name]
    out = r["stdout"]
    assert r["code"] == 0 and "Traceback" not in r["stderr"], r["stderr"][-3000:]
    assert _done(out) == [n for n in chapters() if n not in TRAINING_CHAPTERS] and BANNER not in out
    assert re.search(r"tie_word_embeddings = (\w+)", out)[1] == str(config.get("tie_word_embeddings", text.get("tie_word_embeddings")))
    if big:
        from qwen.tokenizer import Tokenizer
        (hello,) = Tokenizer.load(folder).encode("Hello")
        assert f"embed_tokens.weight[{hello}][:4]" in out and f"{hello} 'Hello'" in out
    else:                                   # extra=True: a rotary buffer, and a layer beyond the config with its norm
        unknown = [t for k, t in header.items() if "rotary_emb" in k
                   or int((re.search(r"\.layers\.(\d+)\.", k) or [0, 0])[1]) >= text["num_hidden_layers"]]
        numel = sum(math.prod(t["shape"]) for t in unknown)
        assert _numbers(_line(out, "other (not used)")) == [len(unknown), numel, 4 * numel]      # fp32: 4 bytes
        assert "(no tokenizer files with 'Hello' here: the example token row is skipped)" in out
        assert "(no tokenizer files in this folder: this section is skipped" in out
    if layout == "multimodal":
        tower = sum(k.startswith("model.visual.") for k in header)
        assert _numbers(_line(out, "vision tower (used in chapter 10)"))[:2] == [10, tower]
        assert float(re.search(r"by hand vs the library: max \|difference\| (\S+)", out)[1]) < 1e-5   # ch10
        stop = _stops(out, "ch11_seeing.py")                             # vocab 512: the image token is beyond it
        assert str(folder / "config.json") in stop and "'image_token_id'" in stop
        assert _numbers(stop)[-3:] == [1, text["vocab_size"] - 1, config["image_token_id"]]
    else:                                                              # a text-only export: ch10 and ch11 stop
        assert not any(k.startswith("model.visual.") for k in header)
        assert _stops(out, "ch10_vision.py") == _stops(out, "ch11_seeing.py")        # the same one line
    # transformers' save_pretrained drops mtp.*: chapter 12 says so in one line and stops, without an error
    assert not any(k.startswith("mtp.") for k in header) and "mtp.*" in _stops(out, "ch12_mtp.py")
    assert int(re.search(r"fp32: (\d+) tokens, decode ", out)[1]) == 4     # chapter 13 with --tokens 4


# ---------------------------------------------------------------- single chapters, options, notebooks

def test_ch02_with_own_text_and_special_tokens(run_script, tiny_path):
    from qwen.tokenizer import Tokenizer
    r = run_script("ch02_embedding.py", "--model", tiny_path, "--lang", "zh", "--text", "<|im_start|>你好 world")
    assert r.returncode == 0, r.stderr
    special = Tokenizer.load(tiny_path).special["<|im_start|>"]         # one id, not its 12 characters' pieces
    assert f"{special} '<|im_start|>'" in r.stdout and "嵌入表" in r.stdout


def test_ch02_lone_surrogate_is_one_clear_line(run_script, tiny_path):
    r = run_script("ch02_embedding.py", "--model", tiny_path, "--text", "a\udc80b",
                   env={"PYTHONIOENCODING": "utf-8:surrogateescape"})
    assert r.returncode == 1 and "Traceback" not in r.stderr and "lone surrogate U+DC80 at position 1" in r.stderr


def test_main_rejects_unknown_chapters_and_download_offline_says_what_to_do(run_script):
    from main import chapters
    for lang in ("en", "zh"):                                       # every chapter and word main.py takes is named
        r = run_script("main.py", "99", "--tiny", "--lang", lang)
        line = _line(r.stderr, "99")
        assert r.returncode == 2 and "Traceback" not in r.stderr and _numbers(line) == [99, *chapters()], r.stderr
        assert re.search(r"\bdownload\b", line) and re.search(r"\bchat\b", line)
    r = run_script("main.py", "download")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 2 and "HF_HUB_OFFLINE is set" in lines[0]
    assert "python main.py download" not in r.stderr and "--model PATH" in lines[1]
    r = run_script("main.py", "download", "--model", "Qwen/Qwen3.5-2B", env={"HF_HUB_OFFLINE": "0"})
    assert r.returncode == 1 and "HF_ENDPOINT=<mirror URL> python main.py download --model Qwen/Qwen3.5-2B" in r.stderr


def test_main_hands_a_chapters_own_options_to_that_chapter(run_script):
    """`python main.py 9 --prompt "..."` (ch09's README options) reaches the chapter, not main.py's usage."""
    r = run_script("main.py", "9", "--tiny", "--prompt", "What is 2+2?", "--max-new-tokens", "2")
    assert r.returncode == 0, r.stderr
    assert "user\\nWhat is 2+2?<|im_end|>" in r.stdout and _numbers(_line(r.stdout, "prefill"))[2] == 2   # reply 2 tokens
    r = run_script("main.py", "2", "--tiny", "--text", "Hi 你好")
    assert r.returncode == 0 and "text: 'Hi 你好'" in r.stdout, r.stderr
    r = run_script("main.py", "--tiny", "--prompt", "--lang", "zh")            # no chapter to hand it to
    assert r.returncode == 2 and "无法识别的参数：--prompt" in r.stderr and "python main.py 9 --prompt" in r.stderr
    r = run_script("main.py", "2", "--tiny", "--bogus")                         # the chapter's parser names it
    assert r.returncode == 2 and "ch02_embedding.py: error: unrecognized arguments: --bogus" in r.stderr


def test_ch09_sends_an_empty_prompt_as_given(run_script):
    """--prompt "" is sent as given (an empty user turn), never replaced silently by the default message."""
    r = run_script("ch09_generate.py", "--tiny", "--prompt", "", "--max-new-tokens", "1")
    assert r.returncode == 0, r.stderr
    assert "'<|im_start|>user\\n<|im_end|>" in r.stdout and "Say hello" not in r.stdout


def test_ch09_one_token_reply_claims_no_decode_speed(run_script):
    """A reply of one token has no decode step (its token comes from the prefill's logits), so ch09 prints
    no decode speed: "decode 1062.4 tokens/s" would be one token over the microseconds of one sample call,
    a speed never measured."""
    r = run_script("ch09_generate.py", "--tiny", "--max-new-tokens", "1")
    assert r.returncode == 0, r.stderr
    line = _line(r.stdout, "prefill")                                   # prompt N tokens: prefill R tokens/s; reply 1 ...
    reply = _numbers(line)[2]
    assert reply == 1 and line.count("tokens/s") == 1 and re.search(r"prefill [\d.]+ tokens/s", line)   # the prefill's only


def test_ch09_sampled_reply_is_not_section_4s_greedy(run_script):
    """With --temperature section 2's reply is seed 0's draw, so comparing seed 0 with it as "greedy" would
    say "seed 0 vs greedy differ: False", which is wrong (the greedy reply is another). Section 4 asks
    generate_ids for the greedy ids, and section 6 checks its hand loop against those; section 2's title
    says "A sampled reply" above a sampled reply, never "A greedy reply"."""
    r = run_script("ch09_generate.py", "--tiny", "--temperature", "0.7", "--max-new-tokens", "2")
    assert r.returncode == 0, r.stderr
    import ast as _ast
    reply = re.search(r"^2\. .*\n-+\n  (.*)\n", r.stdout, re.M)[1]          # section 2's reply, as printed
    seed0 = _ast.literal_eval(re.search(r"seed 0: ('.*')\n", r.stdout)[1])  # section 4's draw with seed 0
    greedy = re.search(r"greedy: by hand \d+ tokens \[([\d, ]+)\]", r.stdout)[1]
    drawn = re.search(r"sampled \(.*by hand \d+ tokens \[([\d, ]+)\]", r.stdout)[1]
    assert reply == seed0 and drawn != greedy                          # the reply is seed 0's draw, not the greedy one
    assert re.findall(r": (True|False)", _line(r.stdout, "seed 0 vs")) == ["True"] * 3
    assert "2. A sampled reply" in r.stdout and "A greedy reply" not in r.stdout
    assert "(section 2's reply was sampled: the greedy reply compared here is generate_ids' own" in r.stdout
    assert re.search(r"greedy: by hand 2 tokens .*; generate_ids 2 tokens; the same ids: True", r.stdout)


def test_bad_model_path_in_chinese_names_its_origin(run_script):
    r = run_script("main.py", "1", "--model", "/no/such/folder", "--lang", "zh")
    assert r.returncode == 1 and "（来自 --model）" in r.stderr and "argument" not in r.stderr
    r = run_script("main.py", "1", env={"QWEN_MODEL": "/no/such/folder"})
    assert r.returncode == 1 and "(from $QWEN_MODEL)" in r.stderr and "(-)" not in r.stderr


def test_chapter_scripts_are_jupytext_percent_notebooks():
    for script in sorted(ROOT.glob("ch[0-9][0-9]_*.py")):
        text = script.read_text(encoding="utf-8")
        assert text.startswith("# %% [markdown]"), script.name
        cells = re.split(r"^# %%.*$", text, flags=re.M)
        assert len(cells) >= 6, script.name
        assert "How to explain it" in text and "Summary / 小结" in text, script.name
        ast.parse(text)



def test_every_prose_cell_is_in_both_languages():
    for script in sorted(ROOT.glob("ch[0-9][0-9]_*.py")):
        for cell in script.read_text(encoding="utf-8").split("# %% [markdown]")[1:]:
            cell = cell.split("# %%")[0]
            body = "\n".join(line for line in cell.splitlines() if not line.startswith(("# #", "# Run:")))
            if re.search(r"[A-Za-z]{4}", body):                             # English prose, then its Chinese pair
                assert re.search(r"[\u4e00-\u9fff]", body), (script.name, body[:120])

def test_chapters_do_not_repeat_setup_code():
    for script in sorted(ROOT.glob("ch0[1-3]_*.py")):
        text = script.read_text(encoding="utf-8")
        assert text.count("chapter(") == 1 and "setup(" not in text and "load_weights(" not in text, script.name
        assert not re.search(r"\bT\(", text), script.name


def _code_cells(text):
    """The code cells of a jupytext percent script, in order."""
    parts = re.split(r"^(# %%.*)$", text, flags=re.M)
    return [body for marker, body in zip(parts[1::2], parts[2::2]) if marker.strip() == "# %%"]


def _computes(node):
    """True when a printed message's argument is more than a constant, a name, an attribute chain, a subscript
    by a constant or a name, a tuple or list of those, or an f-string of those."""
    if isinstance(node, (ast.Constant, ast.Name)):
        return False
    if isinstance(node, (ast.Attribute, ast.Starred)):
        return _computes(node.value)
    if isinstance(node, ast.Subscript):
        return _computes(node.value) or not isinstance(node.slice, (ast.Constant, ast.Name))
    if isinstance(node, (ast.Tuple, ast.List)):
        return any(_computes(e) for e in node.elts)
    if isinstance(node, ast.JoinedStr):
        return any(_computes(v.value) for v in node.values if isinstance(v, ast.FormattedValue))
    return True


EARLY = ("ch0[1-9]_*.py", "ch1[0-3]_*.py")   # the chapters that build, then print (chapters 1-13 so far)


def _early():
    return sorted(script for pattern in EARLY for script in ROOT.glob(pattern))


def test_the_first_code_cell_is_the_imports_and_one_chapter_line():
    for script in _early():
        text = script.read_text(encoding="utf-8")
        body = ast.parse(_code_cells(text)[0]).body
        assert all(isinstance(s, (ast.Import, ast.ImportFrom)) for s in body[:-1]), script.name
        last = body[-1]
        assert isinstance(last, ast.Assign) and [t.id for t in last.targets] == ["ch"], script.name
        assert isinstance(last.value, ast.Call) and last.value.func.id == "chapter", script.name
        assert not re.search(r"^if ready\b", text, re.M), script.name


def test_chapters_name_what_they_print():
    """At most 1 in 5 printed messages (say, print, section) computes inside its arguments: a chapter computes,
    names the result, then prints it."""
    for script in _early():
        calls = [n for n in ast.walk(ast.parse(script.read_text(encoding="utf-8"))) if isinstance(n, ast.Call)
                 and getattr(n.func, "id", getattr(n.func, "attr", "")) in ("say", "print", "section")]
        computing = [n.lineno for n in calls if any(_computes(a) for a in [*n.args, *(k.value for k in n.keywords)])]
        assert calls and len(computing) <= len(calls) / 5, (script.name, computing)


def test_each_early_chapter_shows_a_whole_lesson_file():
    for script in _early():
        shown = re.search(r"^taught = show_code\(ch, (.+)\)$", script.read_text(encoding="utf-8"), re.M)
        assert shown and all(re.fullmatch(r"qwen\.\w+", m) for m in shown[1].split(", ")), script.name


NOTEBOOKS = r"""
import sys, types, warnings, jupytext
warnings.simplefilter("default")
sys.modules.setdefault("ipykernel", types.ModuleType("ipykernel"))   # as inside Jupyter
sys.modules["transformers"] = None        # a learner without it; course_en and course_zh run ch08's comparison
sys.argv = ["ipykernel_launcher.py", "-f", "/tmp/kernel-1234.json"]
for script in {scripts!r}:
    nb = jupytext.read(script)
    namespace = {{"__name__": "__main__"}}
    for cell in nb.cells:
        if cell.cell_type == "code":
            exec(compile(cell.source, "cell", "exec"), namespace)
    print("CELLS", sum(c.cell_type == "code" for c in nb.cells), sum(c.cell_type == "markdown" for c in nb.cells))
"""


@pytest.mark.timeout(360)        # every chapter, as a whole-course run: 35 s of CPU can take 120 s at load 11
def test_chapters_open_and_run_as_notebooks(tiny_path):
    """Each chapter read by jupytext as a notebook, its code cells run in order, as Jupyter would;
    the tiny checkpoint and the language chosen by environment variables, not flags. Without
    transformers (its import and ch08's comparison: ~2.5 s of CPU, run by the course fixtures)."""
    from forkserver import python
    pytest.importorskip("jupytext")
    scripts = [str(s) for s in sorted(ROOT.glob("ch[0-9][0-9]_*.py"))]
    r = python(["-c", NOTEBOOKS.format(scripts=scripts)], cwd=ROOT, timeout=330,
               env={**os.environ, "PYTHONIOENCODING": "utf-8", "QWEN_TINY": "1", "QWEN_LANG": "zh"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Warning" not in r.stderr, r.stderr[-2000:]
    counts = re.findall(r"CELLS (\d+) (\d+)", r.stdout)
    assert len(counts) == len(scripts) and all(int(c) >= 5 and int(m) >= 5 for c, m in counts)
    assert r.stdout.count("内置小检查点") == 1 and "第 3 章：三种归一化" in r.stdout
    import inspect
    from qwen.mtp import MTPHead
    assert inspect.getsource(MTPHead.forward).splitlines()[0].strip() in r.stdout   # ch12 shows the head's code in a notebook
    shown = re.split(r"CELLS \d+ \d+\n", r.stdout)[:-1]              # each chapter's output, in order
    assert [n for n, out in zip(scripts, shown) if not re.search(r"^# qwen/\w+\.py:\d+  \S", out, re.M)] == []
    assert "在笔记本里会直接打印在这里" not in r.stdout
    assert "跳过（没有安装 transformers，或用了 --no-reference）" in r.stdout     # ch08 without transformers


def test_help_is_in_the_chosen_language(run_script):
    r = run_script("main.py", "--help", "--lang", "zh")
    assert r.returncode == 0 and "章节号" in r.stdout and "QWEN_TINY=1" in r.stdout
    assert "位置参数" in r.stdout and "显示本帮助并退出" in r.stdout and "positional arguments" not in r.stdout
    assert r.stdout.startswith("用法：main.py")
    assert "\n位置参数：\n" in r.stdout and "\n选项：\n" in r.stdout and "选项:" not in r.stdout   # full-width colons
    r = run_script("ch07_deltanet.py", "--help", "--lang", "zh")
    assert "\n选项：\n" in r.stdout and ":\n" not in r.stdout
    r = run_script("main.py", "--lang", "zh", "--model")                 # argparse's own error, translated
    assert r.returncode == 2 and "main.py：错误：参数 --model 需要一个值" in r.stderr and "argument" not in r.stderr
    r = run_script("main.py", "--model")
    assert r.returncode == 2 and "main.py: error: argument --model: expected one argument" in r.stderr


def test_main_with_a_chapter_and_help_shows_the_chapters_own_options(run_script):
    """`python main.py 9 --help` shows the chapter's help, in the chosen language: chapter 9's --dtype,
    --prompt and --think, which `python main.py 9 --dtype bfloat16` takes, are found there, not in main.py's
    own help; main.py's help says where a chapter's options are."""
    r = run_script("main.py", "9", "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: ch09_generate.py"), r.stdout[:300] + r.stderr[-500:]
    assert "--dtype {float32,bfloat16}" in r.stdout and "--prompt PROMPT" in r.stdout and "--think" in r.stdout
    assert "half the memory" in " ".join(r.stdout.split())                     # what --dtype bfloat16 does
    r = run_script("main.py", "--lang", "zh", "13", "-h")
    assert r.returncode == 0 and r.stdout.startswith("用法：ch13_quantize.py") and "与 fp32 比较的贪心词元数" in r.stdout
    r = run_script("main.py", "--help")
    assert r.returncode == 0 and "python main.py 9 --help" in r.stdout and "--dtype" not in r.stdout


def test_main_chat_with_an_option_it_lacks_says_so(capsys):
    """`python main.py chat --dtype bfloat16` says that chat takes main.py's own options (chat has no
    --dtype), not 'a chapter's own options go after its number': the option is already after 'chat'."""
    import main
    with pytest.raises(SystemExit) as e:
        main.main(["chat", "--tiny", "--dtype", "bfloat16"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "unrecognized arguments: --dtype bfloat16 (chat takes main.py's own options" in err
    assert "after its number" not in err


def test_chapter_api_reads_the_environment(tiny_path, monkeypatch, capsys):
    """Notebook users choose with QWEN_TINY / QWEN_LANG / QWEN_MODEL instead of flags."""
    import engine.cli as cli
    from qwen.lang import get_lang, set_lang

    monkeypatch.setattr(cli, "_banner_shown", False)
    monkeypatch.setenv("QWEN_TINY", "1")
    monkeypatch.setenv("QWEN_LANG", "zh")
    set_lang(None)
    ch = cli.chapter("Chapter 0: test", "第 0 章：测试", plot=True, argv=[],
                     options={"--text": dict(default="hi", help=("the text", "文字"))})
    assert ch.tiny and ch.path == tiny_path and ch.args.text == "hi" and ch.args.plot is False
    assert get_lang() == "zh" and "norm.weight" in ch.W and ch.tokenizer is not None
    cli.section(2, "Two", "二")
    cli.say("  x = {x}", "  x 等于 {x}", x=3)
    cli.chapter("Chapter 0: test", "第 0 章：测试", argv=["--lang", "en"])     # a second chapter in one run
    out = capsys.readouterr().out
    assert out.count("内置小检查点") == 1 and "第 0 章：测试" in out and "\n2. 二\n" in out and "x 等于 3" in out
    monkeypatch.delenv("QWEN_TINY")
    monkeypatch.setenv("QWEN_MODEL", str(tiny_path))
    assert cli.chapter("c", "c", argv=[]).tiny


JUPYTER_FIRST_CELL = r"""
import sys, types, warnings
warnings.simplefilter("default")
ipython = types.ModuleType("IPython")                       # as inside a Jupyter kernel, without ipywidgets
ipython.get_ipython = lambda: types.SimpleNamespace(config={"IPKernelApp": {}})
sys.modules.update({"IPython": ipython, "ipykernel": types.ModuleType("ipykernel"),
                    "ipykernel.zmqshell": types.ModuleType("ipykernel.zmqshell")})
sys.argv = ["ipykernel_launcher.py", "-f", "/tmp/kernel-1234.json"]
from engine.cli import chapter
print("TINY", chapter("c", "c").tiny)                       # no model, offline: the Hub client is imported
"""


def test_no_tqdm_warning_in_the_first_notebook_cell(run_script):
    r = run_script("-c", JUPYTER_FIRST_CELL)
    assert r.returncode == 0 and "TINY True" in r.stdout, r.stderr[-2000:]
    assert "Warning" not in r.stderr and "IProgress" not in r.stderr, r.stderr


# ---------------------------------------------------------------- chapters 4-6 (in the whole-course runs)

def _number(pattern, text):
    m = re.search(pattern, text)
    assert m, pattern
    return float(m.group(1))


def _chapter(out, script):
    """One chapter's output from a whole-course run."""
    start = out.index("# " + script)
    end = out.find("\n# ch", start + 1)
    return out[start:end if end > 0 else None]


def _rope(text_config):
    """(rotary_dim, head_dim, frequencies in float64) from a config.json's text_config, recomputed here."""
    params = text_config["rope_parameters"]
    head_dim = text_config["head_dim"]
    rotary = int(head_dim * params["partial_rotary_factor"])
    return rotary, head_dim, params["rope_theta"] ** (-torch.arange(0, rotary, 2, dtype=torch.float64) / rotary)


def test_ch04(course_en, tiny_path):
    import json
    import math
    out = _chapter(course_en, "ch04_rope.py")
    tiny = json.loads((tiny_path / "config.json").read_text(encoding="utf-8"))["text_config"]
    real = _manifest()["config"]["text_config"]
    R, D, f = _rope(tiny)
    rot = re.search(r"rotary_dim (\d+): (\d+) pairs rotate, (\d+) of (\d+) entries carry no position", out)
    assert tuple(map(int, rot.groups())) == (R, R // 2, D - R, D)
    real_R, real_D, real_f = _rope(real)
    real_rot = re.search(r"Qwen3\.5-0\.8B \(from its config\): (\d+) pairs rotate, (\d+) of (\d+) entries carry no position; "
                         r"slowest pair: a turn every ([\d,]+) tokens", out)
    assert tuple(map(int, real_rot.groups()[:3])) == (real_R // 2, real_D - real_R, real_D)
    assert _ints(real_rot[4]) == round(2 * math.pi / real_f[-1].item())
    context = real["max_position_embeddings"]
    slow = re.search(r"Qwen3\.5-0\.8B \(from its config\): context ([\d,]+) tokens: (\d+) of (\d+) pairs turn less than once", out)
    assert (_ints(slow[1]), int(slow[2]), int(slow[3])) == (context, int((2 * math.pi / real_f > context).sum()), real_R // 2)
    unchanged = re.search(r"entries (\d+)\.\. unchanged: (\w+)", out)
    assert int(unchanged[1]) == R and unchanged[2] == str(_named(4)["rest_unchanged"]) == "True"
    assert _number(r"m - n = 3 each time: spread ([0-9.e+-]+)", out) < 1e-5          # only m - n matters
    assert _number(r"three equal streams\): max \|mrope - plain\| = (\S+)", out) == 0
    angles = re.search(r"position (\d+), fastest pair: angle ([\d.]+) rad in fp32, ([\d.]+) rad in bf16: "
                       r"off by ([\d.]+) rad \(([\d.]+) turns\)", out)
    a32 = (torch.tensor(float(angles[1])) * f[0].float()).item()
    a16 = torch.tensor(a32).bfloat16().item()
    assert tuple(map(float, angles.groups()[1:])) == (round(a32, 1), round(a16, 1), round(abs(a32 - a16), 1),
                                                      round(abs(a32 - a16) / (2 * math.pi), 2))
    assert float(angles[4]) > 2 * math.pi                                           # more than a whole turn lost
    assert "say nothing about Qwen3.5" in out


def test_ch05(course_en, tiny_path):
    import math

    from engine.shapes import language_model_shapes
    from qwen.config import Config
    from qwen.tokenizer import Tokenizer

    out, named = _chapter(course_en, "ch05_mlp.py"), _named(5)
    cfg = Config.load(tiny_path)
    T, H, I = len(Tokenizer.load(tiny_path).encode(named["SENTENCE"])), cfg.hidden_size, cfg.intermediate_size
    shapes = re.search(r"x \[(\d+), (\d+)\] -> gate\(x\), up\(x\) \[(\d+), (\d+)\] -> silu\(gate\) \* up \[(\d+), (\d+)\] "
                       r"-> down \[(\d+), (\d+)\]", out)
    assert tuple(map(int, shapes.groups())) == (T, H, T, I, T, I, T, H)
    assert re.search(r"by hand == MLP module, bit for bit: (\w+)", out)[1] == "True" and named["same"] is True
    z = torch.linspace(-5, 0, 500_001, dtype=torch.float64)
    s = torch.nn.functional.silu(z)
    smallest = re.search(r"smallest silu on a fine grid: (-[\d.]+) at z = (-[\d.]+)", out)
    assert float(smallest[1]) == round(s.min().item(), 4) and abs(float(smallest[2]) - z[s.argmin()].item()) < 1e-3
    real = Config.from_dict(_manifest()["config"])                                    # from the shape rules
    total = sum(math.prod(s) for s, _ in language_model_shapes(real).values())
    per = 3 * real.hidden_size * real.intermediate_size
    line = re.search(r"Qwen3\.5-0\.8B \(its inventory\): per layer ([\d.]+) M; (\d+) layers: ([\d.]+) M; "
                     r"language model: ([\d.]+) M; MLPs: ([\d.]+)%", out)
    assert tuple(map(float, line.groups())) == (round(per / 1e6, 1), real.num_hidden_layers, round(per * real.num_hidden_layers / 1e6, 1),
                                                round(total / 1e6, 1), round(100 * per * real.num_hidden_layers / total, 1))
    wide = re.search(r"Qwen3\.5-0\.8B: intermediate / hidden = ([\d.]+): 3 matrices x ([\d.]+) = ([\d.]+) x hidden\^2 per layer, "
                     r"against 2 x 4 = 8 for a plain 4x MLP \(([\d.]+)x its parameters", out)
    r = real.intermediate_size / real.hidden_size
    assert tuple(map(float, wide.groups())) == (round(r, 2), round(r, 2), round(3 * r, 1), round(3 * r / 8, 2))
    assert float(wide[4]) > 1                                                          # SwiGLU costs more, not the same
    assert "these shares describe random matrices, not Qwen3.5" in out
    assert _number(r"bf16 takes ([0-9.]+)x the fp32 time", out) > 0


def test_ch06(course_en, tiny_path):
    from qwen.config import Config
    out = _chapter(course_en, "ch06_attention.py")
    cfg, header = Config.load(tiny_path), _header(tiny_path)
    layer = cfg.full_attention_layers[0]
    name = f"layers.{layer}.self_attn.q_proj.weight"
    stored = next(t["shape"] for full, t in header.items() if full.endswith("language_model." + name))
    assert _floats(re.search(re.escape(name) + r" +(\[[\d, ]+\])", out)[1]) == stored
    rows = re.search(r"q_proj rows = heads \((\d+)\) x (\d+) x 2 \(query, then gate\) = (\d+)", out)
    assert (int(rows[1]), int(rows[2])) == (cfg.num_attention_heads, cfg.head_dim)
    assert int(rows[3]) == 2 * int(rows[1]) * int(rows[2]) == stored[0]
    real = _manifest()["config"]["text_config"]
    n_full = sum(t == "full_attention" for t in real["layer_types"])
    per_head = 2 * real["head_dim"] * 2 * n_full * 262_144                # k and v, bf16, every full-attention layer
    kv = re.search(r"Qwen3\.5-0\.8B \(config\): kv cache for 262,144 tokens: +([\d.]+) GB with kv heads: (\d+); +([\d.]+) GB "
                   r"if each of the (\d+) query heads", out)
    assert (int(kv[2]), int(kv[4])) == (real["num_key_value_heads"], real["num_attention_heads"])
    assert (float(kv[1]), float(kv[3])) == (round(per_head * int(kv[2]) / 1e9, 2), round(per_head * int(kv[4]) / 1e9, 2))
    assert int(re.search(r"weights above the diagonal: all (\d+)", out)[1]) == 0
    assert _number(r"the first token can only read itself: weight ([\d.]+)", out) == 1.0
    assert _number(r"by hand == Attention module: max \|difference\| (\S+) ", out) == 0
    assert _number(r"vs softmax\(\.\.\.\) @ v by hand: max \|difference\| ([0-9.e+-]+)", out) < 1e-5
    assert _number(r"vs the full run: max \|difference\| ([0-9.e+-]+)", out) < 1e-5
    assert "this pattern means nothing" in out


def test_ch06_prose_says_where_the_model_runs_in_fp32():
    """ch06 never claims "the model itself runs in bf16": load_model is fp32 unless asked, and the attention
    runs in fp32 even with bf16 weights (test_attention checks that)."""
    import inspect
    from qwen.model import load_model
    text = (ROOT / "ch06_attention.py").read_text(encoding="utf-8")
    assert inspect.signature(load_model).parameters["dtype"].default == torch.float32
    assert "the attention itself (scores, softmax, weighted values) in fp32" in text and "用 fp32 计算（见 qwen/attention.py）" in text


def test_ch04_to_ch06_in_chinese(course_zh):
    out = course_zh
    for text in ("第 4 章：旋转位置编码", "第 5 章：SwiGLU MLP", "第 6 章：带输出门的全注意力", "手算 == MLP 模块，逐位相同：是",
                 "分组查询注意力", "键值缓存", "因果掩码", "rotary_dim 4：2 对旋转，16 个数里有 12 个不带位置"):
        assert text in out, text


def test_plots(course_zh, run_script, tmp_path):
    """Every chapter's --plot: course_zh runs with --plot --out COURSE_ZH_FIGURES (the Chinese labels: the
    CJK font or a one-line fallback)."""
    from conftest import COURSE_ZH_FIGURES as figures
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "--plot 需要 matplotlib" in course_zh
        r = run_script("ch04_rope.py", "--tiny", "--plot", "--out", tmp_path)
        assert r.returncode == 0 and "--plot needs matplotlib" in r.stdout, r.stderr[-2000:]
        return
    for name in ("ch03_layer_scales.png", "ch04_rope.png", "ch06_attention.png", "ch07_decay.png", "ch10_positions.png",
                 "ch10_attention.png", "ch12_speculative.png"):
        assert (figures / name).stat().st_size > 10_000, name
    assert (figures / "ch03_final_norm.png").is_file()
    from engine.plots import find_cjk_font        # the child's own lookup: it also finds, by file, a font
    found = find_cjk_font() is not None         # installed after matplotlib's font cache was built
    assert ("没有找到中文字体" in course_zh) == (not found)          # no font: one line, the labels stay in English


def test_one_notation_for_the_norm_weight():
    """The file stores w, the norm multiplies by the scale 1 + w: no 'w - 1' left anywhere a learner reads."""
    files = [*ROOT.glob("ch[0-9][0-9]_*.py"), ROOT / "README.md", *(ROOT / "practice" / "_judge").rglob("*.py"),
             *(ROOT / "qwen").glob("*.py")]
    assert not [f.name for f in files if re.search(r"\bw\s*[-−]\s*1\b", f.read_text(encoding="utf-8"))]


def test_ch07(course_en, tiny_path):
    from qwen.config import Config
    out = _chapter(course_en, "ch07_deltanet.py")
    cfg = Config.load(tiny_path)
    # Qwen3.5-0.8B's memory figures follow from its config: 18 x 16 x 128 x 128 fp32 + conv windows; 12 KB/token
    real = _manifest()["config"]["text_config"]
    n_lin = sum(t == "linear_attention" for t in real["layer_types"])
    n_full = len(real["layer_types"]) - n_lin
    heads, dk, dv = real["linear_num_value_heads"], real["linear_key_head_dim"], real["linear_value_head_dim"]
    conv = (real["linear_conv_kernel_dim"] - 1) * (2 * real["linear_num_key_heads"] * dk + heads * dv)
    state = n_lin * (heads * dk * dv + conv) * 4                                # fp32, as ch09's cache
    per_token = 2 * real["num_key_value_heads"] * real["head_dim"] * 2 * n_full   # k and v in bf16
    real_part = out[out.index("Qwen3.5-0.8B, from its config.json:"):]
    fixed = re.search(r"(\d+) heads x (\d+) linear layers \+ conv windows \(fp32\): ([\d.]+) MB, fixed", real_part)
    assert (int(fixed[1]), int(fixed[2]), float(fixed[3])) == (heads, n_lin, round(state / 1e6, 1))
    kv = re.search(r"KV cache of the (\d+) full-attention layers \(bf16\): ([\d.]+) KB per token", real_part)
    assert (int(kv[1]), float(kv[2])) == (n_full, round(per_token / 1e3, 1))
    assert _number(r"262,144 tokens: KV cache +([\d.]+) GB", real_part) == round(per_token * 262_144 / 1e9, 2)
    before = _number(r"\|k\^T S - v\| before writing: ([\d.]+)", out)
    writes = re.findall(r"beta = ([\d.]+): after the write ([\d.]+) = ([\d.]+) x before \(1 - beta = ([\d.]+)\)", out)
    assert {float(b) for b, *_ in writes} >= {1.0, 0.5}
    for beta, after, ratio, kept in writes:                                    # the error shrinks by 1 - beta
        beta, after, ratio, kept = map(float, (beta, after, ratio, kept))
        assert kept == round(1 - beta, 1) and abs(ratio - kept) < 1e-3 and abs(after - ratio * before) < 2e-3, (beta, after)
    assert [float(after) for b, after, *_ in writes if float(b) == 1.0] == [0.0]
    reads = re.search(r"the same pair written twice: plain linear attention reads ([\d.]+) x v, the delta rule ([\d.]+) x v", out)
    assert (float(reads[1]), float(reads[2])) == (2.0, 1.0)
    k_min = re.search(r"\|k\| = (\S+) \.\. ", out).group(1)                  # below 1: eps inside the root, said next
    assert re.search(r"sqrt\(\S+ / \(\S+ \+ 1e-06\)\) = " + re.escape(k_min) + r"\)", out), k_min
    conv_reach = re.search(r"changing token (\d+)'s input changes the outputs at tokens (\[[\d, ]+\])", out)
    t = int(conv_reach[1])
    assert _floats(conv_reach[2]) == list(range(t, t + cfg.linear_conv_kernel_dim))   # a window of kernel size
    assert re.search(r"output == silu\(w_last \* x_0\): (\w+)", out)[1] == "True"
    assert "random draws, so these heads and half-lives say" in out and "fastest-forgetting" not in out
    # the made-up half-lives at a = 0 come before the note that says they are made up, not after it
    assert out.index("at a = 0 (weights only), the half-lives") < out.index("(tiny checkpoint: A_log, dt_bias")
    diff = float(re.search(r"max \|difference\| (\S+) \(of values up to (\S+)\)", out).group(1))
    assert diff <= 1e-6
    rec_vs_chunk = re.search(r"max \|recurrent - chunked\| = (\S+) \(output\)", out).group(1)
    assert float(rec_vs_chunk) <= 1e-5
    assert re.search(r"2048 tokens x 2 heads: recurrent +[\d.]+ ms, chunked +[\d.]+ ms", out)


def test_ch07_in_chinese(course_zh):
    out = _chapter(course_zh, "ch07_deltanet.py")
    assert "delta 规则" in out and "衰减" in out and "递推" in out and "The delta rule:" not in out


def test_ch07_sentence_ids_are_the_tokenizers(tiny_path):
    """ch07 carries its sentence's token ids (loading the tokenizer would cost it two seconds)."""
    import ast as _ast
    from qwen.tokenizer import Tokenizer
    tree = _ast.parse((ROOT / "ch07_deltanet.py").read_text(encoding="utf-8"))
    consts = {t.targets[0].id: _ast.literal_eval(t.value) for t in tree.body
              if isinstance(t, _ast.Assign) and getattr(t.targets[0], "id", None) in ("TEXT", "IDS")}
    assert Tokenizer.load(tiny_path).encode(consts["TEXT"]) == consts["IDS"]


def test_ch08(course_en, tiny_path):
    from qwen.config import Config
    out = _chapter(course_en, "ch08_model.py")
    cfg = Config.load(tiny_path)
    pattern = " ".join("F" if t == "full_attention" else "L" for t in cfg.layer_types)
    assert re.search(r"layers \(L = Gated DeltaNet, F = full attention\): ([LF ]+)\n", out)[1] == pattern
    assert cfg.tie_word_embeddings and "output layer: the embedding table itself (tied)" in out
    assert _number(r"exactly these logits: max \|difference\| = (\S+)", out) == 0
    assert _number(r"by hand = the module's output: max \|difference\| = (\S+)", out) < 1e-6
    m = re.search(r"largest \|ours - transformers\| over (\d+) x ([\d,]+) logits: (\S+)", out)
    assert (int(m[1]), _ints(m[2])) == (len(_named(8)["ids"]), cfg.vocab_size) and float(m[3]) < 1e-4
    assert re.search(r"same next token: (\w+)", out)[1] == "True"
    assert "(made-up weights: these guesses are not interpreted)" in out


def test_ch08_tables_align_in_chinese(course_zh):
    out = _chapter(course_zh, "ch08_model.py")
    stream = section_of(out, "2. 残差流")[3:-2]                                  # header, embedding row, 8 layers
    assert len(stream) == 10 and len({width(line) for line in stream}) == 1, stream
    lens = section_of(out, "3. logit lens")[2:-1]                               # where ' p = ' starts, by display width
    assert len(lens) == 9 and len({width(line[:line.rindex(" p = ")]) for line in lens}) == 1, lens


def test_ch09_cache_sizes_name_their_dtype_and_match_chapter_7(course_en, tiny_path):
    """The cache keeps k and v in fp32: ch09's sizes say so, and are chapter 7's bf16 sizes times 2."""
    from engine.cli import size
    from qwen.config import Config
    cfg = Config.load(tiny_path)
    out = _chapter(course_en, "ch09_generate.py")
    k = _named(9)["k_cached"]                                        # a full-attention layer's keys, as cached
    assert re.search(r"kept in (\w+)", out)[1] == {torch.float32: "fp32", torch.bfloat16: "bf16"}[k.dtype]
    bf16 = torch.bfloat16.itemsize                                      # what chapters 6 and 7 count
    assert _numbers(_line(out, "k and v are kept in")) == [k.element_size(), 6, 7, bf16]
    assert _numbers(_line(out, "sizes are 1/"))[:2] == [1, k.element_size() // bf16]
    room = 256 * 2 * cfg.num_key_value_heads * cfg.head_dim * 4 * len(cfg.full_attention_layers)
    assert f"the buffers behind k and v: {size(room)}, room for 256 tokens" in out
    ours = re.search(r"at 32,768 tokens: this cache +(\S+ \S+); keys/values \(fp32\) in all 8 layers would be +(\S+ \S+)", out)
    bf16 = re.search(r"32,768 tokens: KV cache +(\S+ \S+) .* all 8 layers full attention: +(\S+ \S+)",
                     _chapter(course_en, "ch07_deltanet.py"))
    assert ours and bf16, out
    every_layer = 8 * 2 * cfg.num_key_value_heads * cfg.head_dim * 32768
    assert (ours.group(2), bf16.group(2)) == (size(every_layer * 4), size(every_layer * 2))


def test_ch09_in_chinese(course_zh):
    out = _chapter(course_zh, "ch09_generate.py")
    assert "内置小检查点" in course_zh and "编造的词元" in out
    assert "<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n" in out        # the template's empty think block
    assert re.search(r"回复 \d+ 个词元", out)
    m = re.search(r"带缓存的解码 = 全部重新读一遍：最后一步 logits 的最大差 = (\S+)", out)
    assert m and float(m.group(1)) < 1e-5
    assert "相同种子，相同文本：是" in out and "：True" not in out and "流式文本中的替换字符：0" in out
    assert "'龘'（3 个 UTF-8 字节）是 2 个词元：逐个词元解码它们的字节得到 ['\ufffd', '\ufffd']；流式输出得到 ['', '龘']" in out


def test_main_chat_on_the_tiny_checkpoint(run_script):
    r = run_script("main.py", "chat", "--tiny", "--max-new-tokens", "4", input="hello\n/reset\n你好\n")
    assert r.returncode == 0, r.stderr
    assert BANNER in r.stdout and "(conversation and cache cleared)" in r.stdout and r.stdout.rstrip().endswith("Bye.")
    assert r.stderr.count("[4 tokens") == 2 and "Traceback" not in r.stderr


def test_main_chat_on_the_tiny_checkpoint_stops_early_by_default(run_script):
    # 512 made-up tokens per turn take about a minute on a laptop CPU: tiny chat defaults to a short reply
    from main import TINY_CHAT_TOKENS
    r = run_script("main.py", "chat", "--tiny", "--lang", "en", input="hello\n")
    assert r.returncode == 0, r.stderr
    said = re.search(r"each stops after (\d+) \(--max-new-tokens", r.stdout)
    assert int(said[1]) == TINY_CHAT_TOKENS < 512
    assert r.stderr.count(f"[{TINY_CHAT_TOKENS} tokens") == 1 and "Traceback" not in r.stderr


def test_main_rejects_a_reply_length_below_one(run_script):
    """--max-new-tokens 0 or -3 is refused in one line, in the learner's language: 0 is not "the default"
    (512 made-up tokens a chat turn, 24 in chapter 9), and -3 would answer every message with nothing."""
    r = run_script("main.py", "chat", "--tiny", "--max-new-tokens", "0")
    assert r.returncode == 1 and "Traceback" not in r.stderr and _numbers(_line(r.stderr, "--max-new-tokens")) == [1]
    r = run_script("main.py", "9", "--tiny", "--max-new-tokens", "-3", "--lang", "zh")
    assert r.returncode == 1 and _numbers(_line(r.stderr, "--max-new-tokens")) == [1] and "第 9 章" not in r.stdout


def test_download_failure_in_chinese_reads_as_a_sentence(run_script):
    """The Chinese line reads "而且访问 http://... 出错": a space before the address, and a verb (访问), not
    "而且https://huggingface.co 出错"."""
    r = run_script("main.py", "download", "--lang", "zh", env={"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"})
    assert r.returncode == 1 and "里没有，而且访问 http://127.0.0.1:9 出错（" in r.stderr, r.stderr


def test_ch09_finds_the_template_in_tokenizer_config_and_replies_as_long_as_from_main(run_script, tiny_path,
                                                                                     tmp_path, course_en):
    """ch09 finds a chat template kept in tokenizer_config.json (where ChatTemplate.load finds it too)
    instead of stopping with "no chat template"; and `python main.py 9` replies as long as ch09 alone does."""
    import json
    import shutil
    from engine.cli import CHAPTER_REPLY_TOKENS
    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_path, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["chat_template"] = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    (folder / "chat_template.jinja").unlink()
    r = run_script("ch09_generate.py", "--model", folder)
    assert r.returncode == 0 and "it stops here" not in r.stdout, r.stdout + r.stderr
    alone = re.search(r"reply (\d+) tokens: decode [\d.]+ tokens/s \((.*)\)", r.stdout)
    from_main = re.search(r"reply (\d+) tokens: decode [\d.]+ tokens/s \((.*)\)", _chapter(course_en, "ch09_generate.py"))
    assert alone.group(1, 2) == from_main.group(1, 2) == (str(CHAPTER_REPLY_TOKENS), "stopped at --max-new-tokens")


def test_ch09_without_a_template_stops_before_reading_the_weights(run_script, tiny_path, tmp_path):
    """Without a chat template, ch09 stops before it loads the model (3 GB on the real one): there is
    nothing to do with the weights."""
    import shutil
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):     # no weights, no template
        shutil.copy(tiny_path / name, tmp_path / name)
    r = run_script("ch09_generate.py", "--model", tmp_path)
    assert r.returncode == 0 and "no tokenizer or chat template in this folder" in r.stdout, r.stdout + r.stderr
    assert "Error" not in r.stderr


@pytest.mark.timeout(240)
def test_chat_chapters_without_a_template_stop_in_one_line(run_script, tiny_path, tmp_path):
    """Chapters 9, 11, 12 and 16 write prompts with the checkpoint's chat template: without one they say so
    in one line and stop (exit 0), before generating anything."""
    import json
    import shutil
    folder = tmp_path / "no-template"
    shutil.copytree(tiny_path, folder)
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    for script in ("ch09_generate.py", "ch11_seeing.py", "ch12_mtp.py", "ch16_lora.py"):
        r = run_script(script, "--model", folder)
        assert r.returncode == 0 and "no tokenizer or chat template in this folder" in r.stdout, script + r.stderr
        assert "Traceback" not in r.stderr and "reply" not in r.stdout.split("chat template in this folder")[1], script


NO_GPU = """
import runpy, sys, torch
import engine.tokens
torch.cuda.is_available = lambda: False                # a CUDA build of torch on a machine without a GPU
torch.version.cuda = "12.4"
read = engine.tokens.load_tokenizer
engine.tokens.load_tokenizer = lambda path, *a: print("TOKENIZER READ") or read(path, *a)
sys.argv = ["ch09_generate.py", "--tiny", "--device", "cuda"] + sys.argv[1:]
runpy.run_path("ch09_generate.py", run_name="__main__")
"""


def test_ch09_device_without_a_gpu_says_so_in_one_line(run_script):
    """--device cuda without a GPU says that no CUDA GPU was found, not "invalid choice: 'cuda' (choose from
    'cpu')" as if cuda were not a device; said before the tokenizer is read (1-2 s of CPU), as the other
    options are checked."""
    r = run_script("-c", NO_GPU)
    assert r.returncode == 1 and "invalid choice" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert "TOKENIZER READ" not in r.stdout
    assert ("Error: --device cuda: no CUDA GPU was found (this torch is built for CUDA 12.4, but no GPU answers). "
            "Use --device cpu.") in r.stderr
    r = run_script("-c", NO_GPU, "--lang", "zh")
    assert "错误：--device cuda：没有找到 CUDA GPU（这个 torch 是为 CUDA 12.4 构建的，但没有可用的 GPU）。请用 --device cpu。" in r.stderr


# ---------------------------------------------------------------- chapters 10-11

NO_DYNAMO = """
import sys
from qwen.model import load_model
from engine.tiny import tiny_model_path
model = load_model(tiny_model_path())
print("VISUAL", model.visual is not None, "DYNAMO", "torch._dynamo" in sys.modules)
"""


def test_loading_the_tower_does_not_import_torch_dynamo(run_script, tiny_path):
    """nn.Embedding's random init of the position table, on the "meta" device, imports torch._dynamo:
    3-4 s more for every load_model (ch10 --tiny would take 2-3x `import torch`, chapters 8, 9, 11 and
    chat as much more). The loader fills the table, so no init is needed."""
    r = run_script("-c", NO_DYNAMO)
    assert r.returncode == 0 and "VISUAL True DYNAMO False" in r.stdout, r.stdout + r.stderr[-2000:]


def test_chapters_in_one_process_read_the_tokenizer_once(tiny_path, tmp_path, monkeypatch):
    """main.py runs chapters 2, 8, 9, 12 and 13 in one process; reading the 248k-entry tokenizer in each
    would cost about 2 s each. The same folder with the same files gives the same tokenizer; a file that
    changed is read again; without tokenizer files there is none. (The cache is checked on a tokenizer.json
    of the same format with 256 byte tokens and 3 merges: two reads of the real one cost seconds of CPU.)"""
    import json
    import os
    import shutil
    import engine.cli as cli
    from engine.tiny import tokenizer_json
    import engine.tokens

    loads = []
    real = engine.tokens.load_tokenizer
    monkeypatch.setattr(engine.tokens, "load_tokenizer", lambda p, *a: loads.append(p) or real(p, *a))
    monkeypatch.setattr(cli, "_tokenizers", {})
    monkeypatch.setattr(cli, "_banner_shown", True)
    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_path, folder)
    ranks = {**{bytes([b]): b for b in range(256)}, b"He": 256, b"ll": 257, b"llo": 258}
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer_json(ranks)), encoding="utf-8")
    first = cli.chapter("a", "a", argv=["--model", str(folder)]).tokenizer
    second = cli.chapter("b", "b", argv=["--model", str(folder)]).tokenizer
    assert first is second and len(loads) == 1 and len(first.vocab) == 259
    st = (folder / "tokenizer.json").stat()
    os.utime(folder / "tokenizer.json", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))   # the file changed
    third = cli.chapter("c", "c", argv=["--model", str(folder)]).tokenizer
    assert third is not first and len(loads) == 2 and third.encode("Hello") == first.encode("Hello") == [256, 258]
    for name in ("tokenizer.json", "vocab.json", "merges.txt"):
        (folder / name).unlink(missing_ok=True)
    assert cli.chapter("d", "d", argv=["--model", str(folder)]).tokenizer is None and len(loads) == 2


def test_ch10(course_en, tiny_path):
    """Chapter 10's shapes and counts, from the tiny checkpoint's vision_config, its tensors and
    qwen.vision.preprocess on the chapter's own picture; Qwen3.5-0.8B's FLOPs from its published config."""
    import json
    import math
    from engine.cli import count
    from engine.pictures import DEMO_WORD, demo_image
    from qwen.config import Config
    from qwen.vision import preprocess
    out = _chapter(course_en, "ch10_vision.py")
    V = json.loads((tiny_path / "config.json").read_text(encoding="utf-8"))["vision_config"]
    P, M, TP, D, C = V["patch_size"], V["spatial_merge_size"], V["temporal_patch_size"], V["hidden_size"], V.get("in_channels", 3)
    header = {name[len("model.visual."):]: t["shape"] for name, t in _header(tiny_path).items() if name.startswith("model.visual.")}
    image = demo_image()
    pixels, grid = preprocess(image, tiny_path)
    t, h, w = grid[0].tolist()
    N, K = pixels.shape
    assert N == t * h * w and K == C * TP * P * P
    picture = _line(out, "the chapter's own picture")                  # 448 x 448, the word 'CAT'
    assert _numbers(picture) == list(image.size) and f"{DEMO_WORD!r}" in picture
    assert _numbers(_line(out, "grid (t, h, w)")) == [w * P, h * P, P * M, P, M, t, h, w]
    assert _numbers(_line(out, "pixel_values"))[:-1] == [N, K, N, C, TP, P, P, K]       # then its milliseconds
    cells = _merge_order(h, w, M)
    first = _numbers(_line(out, "the first 8 patches are the grid cells"))
    assert first[:1 + 4 * M * M] == [2 * M * M, *(v for cell in cells[:2 * M * M] for v in cell)], first
    kernel = header["patch_embed.proj.weight"]
    assert kernel == [D, C, TP, P, P] and _numbers(_line(out, "Conv3d weight")) == [*kernel, TP, P, P, D, K]
    assert _number(r"the Conv3d gives the same: max \|difference\| (\S+)", out) < 1e-5
    table = header["pos_embed.weight"]
    side = math.isqrt(table[0])
    assert _numbers(_line(out, "pos_embed [")) == [*table, side, side, D, h, w]
    assert _number(r"by hand vs F\.interpolate: max \|difference\| (\S+)", out) < 1e-6
    assert _numbers(_line(out, "corners stay corners")) == [0, 0, 0, 0, h - 1, w - 1, side - 1, side - 1, 0]   # exactly
    scores = re.search(r"scores (\S+) (\S+) (\S+): the same, only being \(2, 2\) apart matters; "
                       r"\(2, 3\) with \(0, 4\): (\S+)", out)
    assert scores and len(set(scores.groups()[:3])) == 1 and scores[4] != scores[1], out
    named = re.search(r"random q, k at cells (.*): scores", out)[1]           # cells of this 24 x 24 grid, never (7, 30)
    assert all(int(r) < h and int(c) < w for r, c in re.findall(r"\((\d+), (\d+)\)", named)), named
    look = re.search(r"from patch (\d+) at cell \((\d+), (\d+)\): weights over the (\d+) patches sum to ([\d.]+)", out)
    assert cells[int(look[1])] == (int(look[2]), int(look[3])) and int(look[4]) == N and float(look[5]) == 1.0
    assert "where this head looks means nothing" in out
    top = re.search(r"its largest weight: (\d\.\d{4}) on cell \(\d+, \d+\) \(an even spread would give (\d\.\d{4}) each\)", out)
    assert top and float(top[1]) >= float(top[2]) == round(1 / N, 4), out   # both to 4 decimals (not 0.002 against 0.0017)
    H = Config.load(tiny_path).hidden_size
    fc2 = header["merger.linear_fc2.weight"]
    assert fc2 == [H, M * M * D]
    assert _numbers(_line(out, "-> fc1, GELU")) == [N, D, N // (M * M), M * M, D, M * M * D, M * M * D, N // (M * M), fc2[0]]
    token0 = [0, 0, M * M - 1, *(v for cell in cells[:M * M] for v in cell), fc2[0], H]     # width = the hidden size
    assert _numbers(_line(out, "token 0 is made of patches")) == token0
    assert _numbers(_line(out, "<|image_pad|> between"))[:2] == [N // (M * M)] * 2     # tokens in chapter 11's prompt
    assert _number(r"by hand vs the library: max \|difference\| (\S+)", out) < 1e-5
    assert _number(r"the tower took ([\d.]+) s", out) > 0
    real = _manifest()["config"]["vision_config"]                # Qwen3.5-0.8B's tower, 448 x 448 pixels
    d, i, n = real["hidden_size"], real["intermediate_size"], (448 // real["patch_size"]) ** 2
    k, m = 3 * real["temporal_patch_size"] * real["patch_size"] ** 2, n // real["spatial_merge_size"] ** 2
    block = 6 * n * d * d + 4 * n * n * d + 2 * n * d * d + 4 * n * d * i    # qkv, scores and values, proj, MLP
    flops = 2 * n * k * d + real["depth"] * block + 2 * m * 4 * d * (4 * d + real["out_hidden_size"])
    line = re.search(r"Qwen3\.5-0\.8B \(config\), 448 x 448 pixels = (\d+) patches: (.+) FLOPs", out)
    assert (int(line[1]), line[2]) == (n, count(flops))


def test_ch11(course_en, tiny_path):
    """Chapter 11's positions and token counts, from qwen.rope.rope_index, qwen.vision.preprocess, the
    tokenizer and the configs (the tiny checkpoint's; Qwen3.5-0.8B's published one for its 448 x 448 line)."""
    from engine.pictures import demo_image
    from qwen.config import Config
    from qwen.rope import rope_index
    from qwen.tokenizer import Tokenizer
    from qwen.vision import preprocess
    out, named = _chapter(course_en, "ch11_seeing.py"), _named(11)
    cfg, tok = Config.load(tiny_path), Tokenizer.load(tiny_path)
    image_id, merge = cfg.image_tokens()
    rows = re.findall(r"^ +(\d+)  (.+?) +\((\d+), (\d+), (\d+)\)$", out, flags=re.M)
    assert [r[1].strip() for r in rows] == ["Look", ":", "<|vision_start|>"] + ["<|image_pad|>"] * 6 + ["<|vision_end|>", "What", "?"]
    thw = [tuple(map(int, r[2:])) for r in rows]
    assert thw[:3] == [(0, 0, 0), (1, 1, 1), (2, 2, 2)]                        # text: three equal positions
    assert thw[3:9] == [(3, 3 + r, 3 + c) for r in range(2) for c in range(3)]  # the image: its 2 x 3 grid
    assert thw[9:] == [(6, 6, 6), (7, 7, 7), (8, 8, 8)]                        # then max + 1 and on
    small = _numbers(_line(out, "tokens after merging"))                      # a grid of 1 x 4 x 6 patches, 6 tokens
    assert small[:4] == [1, 4, 6, 4 * 6 // merge ** 2] and small[4:6] == [merge, merge]
    ids = tok.encode("Look:") + [cfg.raw["vision_start_token_id"]] + [image_id] * small[3] + [cfg.raw["vision_end_token_id"]] + tok.encode(" What?")
    pos = rope_index(torch.tensor([ids]), torch.tensor([small[:3]]), cfg)[:, 0]
    assert thw == [tuple(p) for p in pos.T.tolist()]
    end = ids.index(cfg.raw["vision_end_token_id"])                            # the first token after the image
    largest = int(pos[:, ids.index(image_id):end].max())
    assert _numbers(_line(out, "after the image:")) == [int(pos[0, end]), largest, 1, end] and pos[0, end] == largest + 1 < end
    assert int(re.search(r"Next: chapter (\d+)", out)[1]) == 12 and "The course ends here" not in out
    real = _manifest()["config"]["vision_config"]                            # 448 x 448 pixels on Qwen3.5-0.8B
    patches, real_merge = 448 // real["patch_size"], real["spatial_merge_size"]
    side = patches // real_merge
    assert _numbers(_line(out, "a 448 x 448 picture")) == [448, 448, patches, patches, real["patch_size"], side * side,
                                                           side, side, side, side * side]
    grid = preprocess(demo_image(), tiny_path)[1][0].tolist()                 # the picture chapter 10 draws
    n_pads = grid[0] * grid[1] * grid[2] // merge ** 2
    rendered = named["rendered"]
    written = tok.encode(rendered)
    block = [cfg.raw["vision_start_token_id"], image_id, cfg.raw["vision_end_token_id"]]
    assert repr(rendered) in out and any(written[i:i + 3] == block for i in range(len(written)))   # one image in the prompt
    assert _numbers(_line(out, "tokens as written")) == [len(written), n_pads, *grid, merge, 2, len(written) - 1 + n_pads]
    assert _number(r"time to the first token: ([\d.]+) s \(prefill of \d+ tokens, 144 of them the image's\)", out) > 0
    assert "(tiny checkpoint: made-up weights: the reply above is made-up tokens, not a description)" in out
    assert _number(r"this picture vs a blank one: max \|difference\| ([\d.]+)", out) > 0
    delta = max(grid[0], grid[1] // merge, grid[2] // merge) - n_pads      # 144 tokens on 12 positions: -132
    read = len(written) - 1 + n_pads + len(named["reply_ids"])
    assert _numbers(_line(out, "rope delta"))[:3] == [read, delta, -delta]
    assert _number(r"cached decoding vs reading it all again: max \|difference\| of the last logits (\S+)", out) < 1e-4


def test_ch10_ch11_in_chinese(course_zh):
    out = _chapter(course_zh, "ch10_vision.py") + _chapter(course_zh, "ch11_seeing.py")
    for text in ("图块嵌入就是一次矩阵乘法", "合并器：4 个图块变成 1 个词元", "网格（t，h，w）=（1，24，24）", "双向注意力",
                 "首词元用时：", "图像最大的位置 5 + 1", "只占 14 个位置，而不是 196 个", "上面的回复是编造的词元，不是描述"):
        assert text in out, text
    assert "The patch embedding" not in out and "time to the first token" not in out


OWN_IMAGE = """
import runpy, sys
from qwen.lang import QwenError
mine, bad = sys.argv[1:3]
for script, extra in [("ch10_vision.py", []), ("ch11_seeing.py", ["--lang", "zh", "--max-new-tokens", "2"]),
                      ("ch10_vision.py", ["--image", bad])]:
    sys.argv = [script, "--tiny", "--image", mine] + extra
    try:
        runpy.run_path(script, run_name="__main__")
    except QwenError as e:
        print("ERROR", script, e)
"""


def test_ch10_ch11_with_your_own_image_and_a_file_that_is_not_one(run_script, tmp_path, tiny_path):
    from PIL import Image
    mine, bad = tmp_path / "mine.png", tmp_path / "notes.png"
    picture = Image.new("RGB", (120, 60), (0, 128, 255))
    picture.paste((255, 0, 0), (10, 10, 40, 40))
    picture.save(mine)
    bad.write_text("not a picture", encoding="utf-8")
    r = run_script("-c", OWN_IMAGE, mine, bad)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert f"{mine}: 120 x 60 pixels" in r.stdout and "grid (t, h, w) = (1, 16, 30)" in r.stdout   # 64 x 120 pixels
    from qwen.vision import preprocess
    t, h, w = preprocess(mine, tiny_path)[1][0].tolist()
    look = re.search(r"from patch (\d+) at cell \((\d+), (\d+)\):", r.stdout)      # the picture's centre
    assert _merge_order(h, w, 2)[int(look[1])] == (int(look[2]), int(look[3])) == (h // 2, w // 2)
    assert _numbers(_line(r.stdout, " / 2^2"))[1:5] == [t * h * w // 4, t, h, w] and "首词元用时：" in r.stdout   # ch11, in Chinese
    errors = [line for line in r.stdout.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1 and errors[0].startswith(f"ERROR ch10_vision.py {bad}"), errors
    r = run_script("main.py", "11", "--tiny", "--image", bad, "--lang", "zh")       # main.py hands --image on
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and "Traceback" not in r.stderr and len(lines) == 2 and str(bad) in lines[0], r.stderr
    assert lines[0].startswith("错误：") and "第 11 章" in r.stdout
# ---------------------------------------------------------------- chapter 12 and --speculative

def test_ch12(course_en, tiny_path):
    """The MTP head by hand, speculative decoding equal to plain greedy, every path with replayed drafts,
    the caches after a rollback, the draft vocabulary's coverage, the costs: on the tiny checkpoint,
    where every acceptance is chance and the chapter says so."""
    import math
    from engine.cli import count
    out, named = _chapter(course_en, "ch12_mtp.py"), _named(12)
    header = {name: t["shape"] for name, t in _header(tiny_path).items() if name != "__metadata__"}
    head = [math.prod(shape) for name, shape in header.items() if name.startswith("mtp.")]
    lm = sum(math.prod(shape) for name, shape in header.items() if ".language_model." in name)   # the tied table once
    tensors = re.search(r"(\d+) tensors under mtp\.\*: (.+) parameters, ([\d.]+)% of the language model's (.+) \(", out)
    assert (int(tensors[1]), tensors[2], float(tensors[3]), tensors[4]) == (len(head), count(sum(head)),
                                                                           round(100 * sum(head) / lm, 1), count(lm))
    assert _number(r"by hand == the library's MTPHead \(qwen/mtp\.py\): max \|difference\| (\S+)", out) < 1e-6
    m = re.search(r"the head's guess for token t \+ 2 = the model's greedy token there: (\d+) of (\d+) positions", out)
    assert m and int(m[1]) <= 2 and int(m[2]) > 40                   # random weights: chance, about 1 in 248,077
    assert "these shares mean nothing" in out and "not measured here" in out
    assert re.search(r"engine\.speculative\.teacher_forced_acceptance: (\w+)", out)[1] == str(named["same_count"]) == "True"
    assert re.search(r"teacher-forced acceptance on section 2's text: \d+% with the cut vocabulary, \d+% without", out)
    rule = _numbers(_line(out, "the model's choices"))                    # drafts [5, 7, 9], choices [5, 7, 4, 8] -> ...
    drafts, choices = rule[:3], rule[3:7]
    agree = next((i for i, (d, c) in enumerate(zip(drafts, choices)) if d != c), len(drafts))
    assert rule[7:] == [agree, choices[agree]]                         # the agreeing drafts, then the model's own token
    k = int(re.search(r"speculative \(k = (\d+)\) == plain greedy[^:]*: (True)\n", out)[1])
    assert k == named["K"] and named["spec"] == named["plain"]
    n = int(re.search(r"reply \((\d+) tokens\)", out)[1]) - 1       # the tokens after the first, one per verify pass
    assert _numbers(_line(out, "verify passes")) == [n, named["spec_stats"]["rounds"], round(n / named["spec_stats"]["rounds"], 2), 1]
    spec = named["spec_stats"]
    assert _numbers(_line(out, "drafts accepted:")) == [spec["accepted"], spec["drafted"], round(100 * spec["accepted"] / spec["drafted"])]
    rounds = math.ceil(n / (k + 1))                                    # every draft right: k + 1 tokens a pass
    replayed = {kind: _numbers(_line(out, kind))[-3:] for kind in ("all accepted (", "all rejected (")}
    assert replayed["all accepted ("] == [n - rounds, n - rounds, round(n / rounds, 2)]     # 15 tokens: 11 of 11, 3.75
    rejected = sum(min(k, left - 1) for left in range(n, 0, -1))       # one token a pass, fewer drafts at the end
    assert replayed["all rejected ("] == [0, rejected, 1]
    assert len(re.findall(r"accepted, [\d.]+ tokens per forward pass; the plain greedy tokens: True", out)) == 3
    mix = re.search(r"a mix \(\d+ rounds of drafts, in turn: all right, only the first right, none right[^)]*\): (\d+) of \d+ accepted, "
                    r"([\d.]+) tokens per forward pass; the plain greedy tokens: True", out)
    assert mix and int(mix[1]) > 0 and 1 < float(mix[2]) < 3.75
    caches = re.search(r"after the mixed run: (\d+) positions in both caches; Gated DeltaNet states differ from plain "
                       r"decoding's by at most\n +(\S+), conv windows by (\S+), attention keys and values \(cut back\) "
                       r"by (\S+)\n", out)
    assert caches and all(float(x) < 1e-5 for x in caches.group(2, 3, 4)), caches
    assert "replayed drafts: these counts show the mechanism" in out
    cover = re.findall(r"\n  ([\d,]+) most frequent ids +([\d.]+)% +([\d.]+)%", out)
    assert len(cover) >= 2 and [c[0] for c in cover[:2]] == ["256", "1,024"]
    shares = [(float(a), float(b)) for _, a, b in cover]
    assert all(x <= y for x, y in zip(shares, shares[1:])) and 0 < shares[0][1] < shares[-1][1] <= 100
    first = re.search(r"the first ([\d,]+) ids \(merge order\) +([\d.]+)% +([\d.]+)%", out)
    assert first and first[1] == cover[-1][0] and float(first[3]) < shares[-1][1]   # Chinese ids come late in BPE order
    assert re.search(r"the head guessing among these [\d,]+ ids \([\d.]+% of the output layer's rows\): "
                     r"the plain greedy reply: True", out)
    verify = _number(r"one verify pass of 4 tokens = ([\d.]+) decode steps", out)
    draft, cut = (float(x) for x in re.search(r"one draft = ([\d.]+) decode steps with the whole output layer, ([\d.]+) "
                                              r"with the cut vocabulary", out).groups())
    assert verify > 0 and cut < draft                                  # fewer rows: a cheaper draft (timed, so loose)
    line = re.search(r"cut vocabulary, draft = ([\d.]+): a = 0\.65: ([\d.]+)x; a = 0\.8: ([\d.]+)x; a = 1 "
                     r"\(every draft right\): ([\d.]+)x", out)
    d, a65, a80, a1 = map(float, line.groups())
    tokens = lambda a: (1 - a ** 4) / (1 - a)                          # the printed formula, k = 3
    assert abs(a65 * (3 * d + verify) - tokens(0.65)) < 0.05 * tokens(0.65) and a65 < a80 < a1
    assert "a = 0.65 / 0.8 are third-party figures for the trained head, not this one" in out
    tv = re.search(r"made-up p and q over 6 tokens, 2,000 rounds: the first token's frequencies differ from p by "
                   r"([\d.]+) \(total variation\); 2,000 tokens drawn straight from p differ by less than ([\d.]+) in "
                   r"95% of 1,000 tries: within chance", out)
    assert tv and float(tv[1]) < float(tv[2]) < 0.05
    p, q = named["p_made"], named["q_made"]                              # keeping every draft: q's frequencies
    assert _numbers(_line(out, "keeping every draft"))[-1] == round(0.5 * float((p - q).abs().sum()), 3) > 0.5
    assert _exercises_said(out) == _exercises_of(12)
    assert re.search(r"Done: chapter\(s\) 1, 2, [\d, ]*\b12\b", course_en)        # main.py runs it with the others


def test_ch12_in_chinese(course_zh):
    out = _chapter(course_zh, "ch12_mtp.py")
    for text in ("第 12 章：用 MTP 头往前多看一步", "推测解码（k = 3）== 普通贪心解码，逐词元相同：是", "教师强制",
                 "重放的草稿", "草稿词表", "预计加速比", "截回之后", "第三方报告的接受率", "7. 采样：接受 / 拒绝规则",
                 "总变差距离"):
        assert text in out, text
    assert "：True" not in out and "Teacher-forced" not in out
    table = section_of(out, "5. 草稿词表")[3:]                            # header and rows: aligned by display width
    rows = [line for line in table if re.search(r"[\d.]+% +[\d.]+%$", line) or "英文" in line]
    assert len(rows) >= 4 and len({width(line) for line in rows}) == 1, rows


def test_speculative_option_refuses_bad_values_in_one_line(run_script):
    """--speculative takes a whole number from 1 to qwen.mtp.MAX_DRAFTS, checked before any weights are read."""
    from qwen.mtp import MAX_DRAFTS
    for value in ("0", "x"):
        r = run_script("main.py", "9", "--tiny", "--speculative", value)
        assert r.returncode == 1 and "Traceback" not in r.stderr and "Chapter 9" not in r.stdout, r.stderr
        first = r.stderr.splitlines()[0]                              # names the option and the value, then 1 .. MAX_DRAFTS
        assert first.startswith(f"Error: --speculative {value}:") and _numbers(first)[-3:-1] == [1, MAX_DRAFTS], first
    r = run_script("main.py", "3", "--tiny", "--speculative", "3")          # a chapter that does not generate
    takes = [int(p.name[2:4]) for p in sorted(ROOT.glob("ch[0-9][0-9]_*.py")) if '"--speculative"' in p.read_text(encoding="utf-8")]
    line = _line(r.stderr, "error: --speculative")                     # the chapters that take it, then the one given
    assert r.returncode == 2 and _numbers(line)[:len(takes)] == takes and _numbers(line)[-1] == 3, r.stderr
    r = run_script("ch12_mtp.py", "--tiny", "--speculative", str(MAX_DRAFTS + 1), "--lang", "zh")
    assert r.returncode == 1 and f"错误：--speculative {MAX_DRAFTS + 1}：请给出 MTP 头每步起草的词元数" in r.stderr
    assert "1. " not in r.stdout                                      # refused before the chapter computes anything


def _without_mtp(tiny_path, folder):
    """The tiny checkpoint with its mtp.* tensors removed (as transformers' save_pretrained writes it)."""
    import json
    import shutil
    from safetensors.torch import load_file, save_file
    from engine.tiny import REAL_SHARD_NAME
    shutil.copytree(tiny_path, folder)
    tensors = {k: v for k, v in load_file(folder / REAL_SHARD_NAME).items() if not k.startswith("mtp.")}
    save_file(tensors, folder / REAL_SHARD_NAME, metadata={"format": "pt"})
    index = json.loads((folder / "model.safetensors.index.json").read_text(encoding="utf-8"))
    index["weight_map"] = {k: v for k, v in index["weight_map"].items() if not k.startswith("mtp.")}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    return folder


def test_speculative_decoding_without_an_mtp_head_is_one_line(run_script, tiny_path, tmp_path):
    folder = _without_mtp(tiny_path, tmp_path / "no-mtp")
    r = run_script("main.py", "9", "--model", folder, "--speculative", "3")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    first = r.stderr.splitlines()[0]                                  # what is missing, and the option to drop
    assert first.startswith("Error: ") and "mtp.*" in first and "--speculative" in r.stderr.split("mtp.*", 1)[1], r.stderr


def test_speculative_decoding_in_chapter_9_and_in_the_chat(run_script, course_en):
    """The same reply as chapter 9's plain greedy one (a prefix of the whole-course run's), and a greedy chat."""
    r = run_script("main.py", "9", "--tiny", "--speculative", "3", "--max-new-tokens", "8")
    assert r.returncode == 0, r.stderr
    assert re.search(r"speculative decoding, k = 3: \d+ of \d+ drafts accepted, [\d.]+ tokens per forward pass", r.stdout)
    reply = lambda out: section_of(_chapter(out, "ch09_generate.py"), "2. A greedy reply")[2]
    assert reply(course_en).startswith(reply(r.stdout)) and "reply 8 tokens" in r.stdout
    r = run_script("main.py", "chat", "--tiny", "--speculative", "2", "--max-new-tokens", "3", input="hello\n")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    from engine.chat import SAMPLING
    assert _numbers(_line(r.stdout, "MTP head drafts")) == [2, SAMPLING["temperature"]]     # k, and chat's temperature
    assert re.search(r"\[3 tokens; .*\]  \[speculative: \d+ of \d+ drafts accepted", r.stderr)
    r = run_script("main.py", "chat", "--tiny", "--speculative", "2", "--temperature", "0", "--max-new-tokens", "3",
                   input="hello\n")
    assert r.returncode == 0 and _numbers(_line(r.stdout, "MTP head drafts")) == [2, 0], r.stderr   # greedy


def test_speculative_sampling_in_chapter_9_from_main(run_script):
    """main.py passes --temperature to chapter 9: its reply is sampled, with and without --speculative,
    and says so; a bad temperature is one line before any weights are read."""
    from engine.chat import SAMPLING                                  # Qwen's top-k and top-p, as the chat's
    for extra in ([], ["--speculative", "3"]):
        r = run_script("main.py", "9", "--tiny", "--temperature", "0.8", "--max-new-tokens", "6", *extra)
        assert r.returncode == 0, r.stderr
        said = _numbers(_line(r.stdout, "sampled at --temperature"))
        assert said == [0.8, SAMPLING["top_k"], SAMPLING["top_p"], SAMPLING["seed"]], said
        speculative = re.search(r"speculative decoding, k = (\d+)", r.stdout)
        assert (speculative and int(speculative[1])) == (3 if extra else None)
    r = run_script("main.py", "9", "--tiny", "--temperature", "-1", "--speculative", "3")
    assert r.returncode == 1 and "temperature must be a number >= 0" in r.stderr and "Traceback" not in r.stderr
    r = run_script("main.py", "3", "--tiny", "--temperature", "0.5")
    assert r.returncode == 2 and "--temperature is for chat and chapter 9" in r.stderr


SMALL_IMAGE = """
import runpy, sys
from qwen.lang import QwenError
for script, image in [("ch10_vision.py", sys.argv[1]), ("ch11_seeing.py", sys.argv[1]), ("ch10_vision.py", sys.argv[2])]:
    sys.argv = [script, "--tiny", "--image", image, "--max-new-tokens", "2"][:4 if script == "ch10_vision.py" else 6]
    try:
        runpy.run_path(script, run_name="__main__")
    except QwenError as e:
        print("ERROR", script, e)
"""


def test_ch10_ch11_take_a_picture_with_a_side_under_one_block(run_script, tmp_path, tiny_path):
    """A side under the checkpoint's merged block (8 pixels on the tiny checkpoint, 32 on Qwen3.5) is
    resized up to min_pixels, as transformers' processor does (tests/test_image.py), not refused."""
    from PIL import Image
    small, thin = tmp_path / "small.png", tmp_path / "thin.png"
    Image.new("RGB", (20, 20), (0, 128, 255)).save(small)
    Image.new("RGB", (40, 7), (0, 128, 255)).save(thin)
    r = run_script("-c", SMALL_IMAGE, small, thin)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert f"{small}: 20 x 20 pixels" in r.stdout and "grid (t, h, w) = (1, 8, 8)" in r.stdout, r.stdout[-3000:]
    from qwen.vision import preprocess
    t, h, w = preprocess(small, tiny_path)[1][0].tolist()
    assert (t, h, w) == (1, 8, 8) and _numbers(_line(r.stdout, " / 2^2"))[1:5] == [t * h * w // 4, t, h, w]   # 16 tokens
    errors = [line for line in r.stdout.splitlines() if line.startswith("ERROR")]
    assert errors == [] and f"{thin}: 40 x 7 pixels" in r.stdout, errors


# ---------------------------------------------------------------- a chapter's options from QWEN_<OPTION>

def test_a_chapters_options_are_read_from_qwen_environment_variables(run_script):
    """A notebook has no command line: ch02's --text, ch09's --prompt and --max-new-tokens are read from
    QWEN_TEXT, QWEN_PROMPT and QWEN_MAX_NEW_TOKENS (one rule for every chapter's options); the
    command line still wins."""
    r = run_script("ch02_embedding.py", "--tiny", env={"QWEN_TEXT": "Hi 你好"})
    assert r.returncode == 0 and "text: 'Hi 你好'" in r.stdout, r.stderr
    r = run_script("ch09_generate.py", "--tiny", env={"QWEN_PROMPT": "What is 2+2?", "QWEN_MAX_NEW_TOKENS": "2"})
    assert r.returncode == 0, r.stderr
    assert "user\\nWhat is 2+2?<|im_end|>" in r.stdout and _numbers(_line(r.stdout, "prefill"))[2] == 2   # reply 2 tokens
    r = run_script("ch02_embedding.py", "--tiny", "--text", "Bye", env={"QWEN_TEXT": "Hi 你好"})
    assert r.returncode == 0 and "text: 'Bye'" in r.stdout and "Hi 你好" not in r.stdout, r.stderr


def test_options_from_the_environment_in_process(monkeypatch):
    """The rule, in the options plumbing: typed as the option is (int), store_true from 1/true, choices
    checked; a bad value is one QwenError naming the variable, in either language."""
    from engine.cli import chapter, env_name
    from qwen.lang import QwenError, set_lang
    assert env_name("--max-new-tokens") == "QWEN_MAX_NEW_TOKENS" and env_name("--image") == "QWEN_IMAGE"
    options = {"--image": dict(default=None, help=("a picture", "图像")),
               "--max-new-tokens": dict(type=int, default=64, help=("tokens", "词元")),
               "--think": dict(action="store_true", help=("think", "思考")),
               "--device": dict(default="cpu", choices=["cpu", "cuda"], help=("device", "设备"))}
    monkeypatch.setenv("QWEN_TINY", "1")
    threads = torch.get_num_threads()                                # chapter() sets the thread count
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    for name, value in {"QWEN_IMAGE": "cat.png", "QWEN_MAX_NEW_TOKENS": "5", "QWEN_THINK": "1"}.items():
        monkeypatch.setenv(name, value)
    ch = chapter("t", "t", options=options, argv=[])
    assert (ch.args.image, ch.args.max_new_tokens, ch.args.think, ch.args.device) == ("cat.png", 5, True, "cpu")
    assert chapter("t", "t", options=options, argv=["--max-new-tokens", "7"]).args.max_new_tokens == 7
    monkeypatch.setenv("QWEN_DEVICE", "tpu")
    with pytest.raises(QwenError) as e:
        chapter("t", "t", options=options, argv=[])
    assert "QWEN_DEVICE='tpu'" in e.value.en and "--device" in e.value.en and "QWEN_DEVICE='tpu'" in e.value.zh
    monkeypatch.setenv("QWEN_DEVICE", "cpu")
    monkeypatch.setenv("QWEN_MAX_NEW_TOKENS", "many")
    with pytest.raises(QwenError, match="QWEN_MAX_NEW_TOKENS='many'"):
        chapter("t", "t", options=options, argv=[])
    set_lang("en")
    assert torch.get_num_threads() == threads


def test_the_notebook_extra_is_declared_and_its_install_line_is_in_the_readme():
    tomllib = pytest.importorskip("tomllib")                         # Python 3.11+
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    names = {re.split(r"[<>=\[ ]", d)[0].lower() for d in extras["notebook"]}
    assert {"jupyter", "jupytext"} <= names
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.count("pip install -e .[notebook]") >= 2 and "QWEN_IMAGE" in readme          # EN and ZH
