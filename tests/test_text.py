"""What the chapters say is what they compute, and the Chinese text follows TERMINOLOGY.md's rules.

The course runs are the ones tests/test_chapters.py uses (one process each, cached for the session)."""
import ast
import re

import pytest

from conftest import ROOT
from helpers import GLOSSARY_IN_ENGLISH, _without_code, chinese_text_problems


def _chapter(out, script):
    start = out.index("# " + script)
    end = out.find("\n# ch", start + 1)
    return out[start:end if end > 0 else None]


def _source(name):
    return (ROOT / name).read_text(encoding="utf-8")


# ---------------------------------------------------------------- statements that must stay right

def test_ch07_says_what_the_query_scale_does(course_en):
    """q / sqrt(dk) does not keep "a read of the size of the stored values": it makes the read 1/sqrt(dk)
    of v (1/11.3 at dk = 128), and the chapter measures it."""
    text = _source("ch07_deltanet.py")
    m = re.search(r"q = k gives ([\d.]+) x v; q = k / sqrt\((\d+)\) gives ([\d.]+) x v \(([\d.]+)x smaller\)",
                  _chapter(course_en, "ch07_deltanet.py"))
    assert m, "the measured read is printed"
    same, dk, scaled = float(m[1]), int(m[2]), float(m[3])
    assert abs(same - 1) < 1e-3 and abs(scaled - dk ** -0.5) < 1e-3 and abs(float(m[4]) - dk ** 0.5) < 0.1


def test_ch07_counts_the_fixed_memory_as_the_course_keeps_it(course_en):
    """ch07 counts the conv windows in fp32 (Qwen3.5-0.8B: 20.2 MB, not bf16's 19.5 MB), as the cache of
    chapter 9 keeps them: both chapters give the same figure."""
    ch07, ch09 = _chapter(course_en, "ch07_deltanet.py"), _chapter(course_en, "ch09_generate.py")
    assert "conv windows (fp32): 20.2 MB, fixed" in ch07 and "conv windows (bf16)" not in ch07
    state = re.search(r"1,024 tokens: KV cache +\S+ \S+ +linear-attention state +(\S+ \S+)", ch07)[1]
    cached = re.search(r"conv windows \+ states of \d+ linear layers (\S+ \S+)", ch09)[1]
    assert state == cached, (state, cached)


def test_ch05_says_which_matmuls_run_in_bf16(course_en):
    """Chapter 5 never says "the matmuls run in bf16 too": that holds for its hand-loaded layer only, and
    load_model is fp32."""
    for name in ("ch05_mlp.py", "qwen/mlp.py"):
        assert "the matmuls run in bf16 too" not in _source(name) and "矩阵乘法也用 bf16 做（" not in _source(name), name
    assert "in the model `load_model` builds" in _source("qwen/mlp.py")
    assert "this chapter's layer computes in bfloat16 (as stored); chapter 8's load_model converts to float32 " \
           "by default" in _chapter(course_en, "ch05_mlp.py")


def test_ch04_says_where_the_spread_comes_from(course_en, course_zh):
    """The m - n spread (3.1e-04 on the full-size checkpoint) is fp32 rounding: float64 angles beside it."""
    m = re.search(r"spread ([\d.e+-]+), from fp32 rounding of the angles m x f_i\n +and of their cos and sin; "
                  r"with float64 angles ([\d.e+-]+)\)", _chapter(course_en, "ch04_rope.py"))
    assert m, "the spread names its cause"
    spread, exact = float(m[1]), float(m[2])
    assert exact < 1e-12 and spread > 1000 * max(exact, 1e-18)
    assert "角度用 float64 时为" in _chapter(course_zh, "ch04_rope.py")


def test_ch09_does_not_say_every_chinese_character_is_3_bytes():
    text = _source("ch09_generate.py")
    assert len("𠀀".encode("utf-8")) == 4 and "such as 𠀀, are 4" in text and "例如 𠀀，是 4 个" in text


# ---------------------------------------------------------------- the Chinese text

def _pairs():
    """(file, English, Chinese) for every call with an English and a Chinese string literal."""
    files = [p for p in ROOT.rglob("*.py") if not any(part.startswith((".venv", "tests", "build"))
                                                     for part in p.relative_to(ROOT).parts)]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                texts = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                for en, zh in zip(texts, texts[1:]):
                    if re.search(r"[\u4e00-\u9fff]", zh) and not re.search(r"[\u4e00-\u9fff]", en):
                        yield path.relative_to(ROOT), en, zh


def test_a_prompt_is_tishici_a_hint_is_tishi():
    """One word for one idea: a prompt is 提示词 everywhere, a hint 提示 (TERMINOLOGY.md)."""
    glossary = _source("TERMINOLOGY.md")
    assert "| prompt (the text a model is given) | 提示词 |" in glossary and "| hint (the judge's --hint) | 提示 |" in glossary
    pairs = list(_pairs())
    prompts = [(f, zh) for f, en, zh in pairs if re.search(r"(?<!-)\bprompt", en, re.I)]
    assert len(prompts) >= 4 and not [p for p in prompts if "提示词" not in p[1] or re.search(r"提示(?!词)", p[1])], prompts
    hints = [(en, zh) for _, en, zh in pairs if re.search(r"(?<![-{.])\bhints?\b", en, re.I)]
    assert hints and all("提示" in zh for _, zh in hints), [h for h in hints if "提示" not in h[1]]
    for name in [*sorted(p.name for p in ROOT.glob("ch[0-9][0-9]_*.py")), "main.py", "engine/chat.py", "qwen/generate.py"]:
        assert not re.search(r"提示(?!词)", _source(name)), name                     # no hints there: only prompts


BEFORE = [  # lines the Chinese output must not print, each with the kind of problem it has
    ("  head 0: #3 '都是' (0.49)", "an English word"),
    ("  核对：最后一层之后的 lens 就是这些 logits：最大差 = 0.0e+00", "an English word"),
    ("  ln(248,044) = 12.42 nats：平坦分布的熵", "an English word"),
    ("1. 大小固定的记忆 vs 不断增长的键值缓存", "an English word"),
    ("     64 个词元 x 2 个头：递推     9.5 ms，分块    0.8 ms（11.6 倍）", "an English word"),
    ("  Qwen3.5-0.8B：hidden_size 1024，24 层，共享嵌入 是", "a space between two Chinese words"),
    ("  tie_word_embeddings = 是", "是/否 after '=' or a formula"),
    ("  decode(encode(文字)) == 文字：是", "是/否 after '=' or a formula"),
    ("    ✗ rope_frequencies：小检查点 配置：head_dim 16", "a space between two Chinese words"),
    ("        最大绝对差 2.01；0.0% 的数值在容差内（atol=1e-05, rtol=1e-05）", "', ' between items (use 、 or ，)"),
    ("        输入：[3, 16] float32, [16] bfloat16, float", "', ' between items (use 、 or ，)"),
    ("    之后   类型      末词元 RMS        平均 RMS", "RMS as a word (均方根)"),
    ("  从嵌入到最后一层，残差流的 RMS 增大了 1.2 倍", "RMS as a word (均方根)"),
    ("1. 由对话模板写出的提示", "提示 for a prompt (提示词)"),
    ("  F = 全注意力：2 层 (3, 7)", "ASCII punctuation next to Chinese"),
    ("推测解码：MTP 头每步起草 3 个词元，由模型验证；回复照常采样（temperature 0.7：接受 / 拒绝规则保持这个分布不变）。",
     "an English word"),
    ("  （小检查点的大小：hidden 为 16，而 248,320 行的输出层占了每一步的大部分；这些比值说明不了", "an English word"),
    ("  int8         39.8 KB        5.5 MB        7.8 KB        5.5 MB  （每个词元要读的字节少 2.9 倍）",
     "N 倍 for a fraction (是 X 的 1/N)"),
]
AFTER = ["    头 0：#3 '都是'（0.49）", "  核对：logit lens 在最后一层之后读出的就是这些 logits：最大差 = 0.0e+00",
         "  ln(248,044) = 12.42 奈特：平坦分布的熵", "  RMS(h) = 0.5      最高概率 6.4e-06  熵 12.42 奈特",
         "  E 的 512 行：max |RMS^2 - (sigma^2 + mu^2)| = 4.7e-10；平均 |mu| / RMS = 0.199",
         "  tie_word_embeddings = True", "  decode(encode(文字)) 还原出原文：是", "  手算 == MLP 模块，逐位相同：是",
         "  (m, n) = (3, 0)、(10, 7)：-4.79751、-4.79751", "        输入：[3, 16] float32、[16] bfloat16、float",
         "    之后   类型    末词元均方根    平均均方根", "1. 由对话模板写出的提示词", "  分组                 张量数",
         "  int8         39.8 KB        5.5 MB        7.8 KB        5.5 MB  （每个词元要读的字节是 fp32 的 1/2.9）"]


@pytest.mark.parametrize("line, kind", BEFORE)
def test_each_kind_of_chinese_text_problem_is_caught(line, kind):
    assert kind in [k for k, _ in chinese_text_problems(line)]


def test_no_chinese_string_uses_an_english_word_for_a_glossary_term():
    """A glossary term is its Chinese word in Chinese text: 温度, not '回复照常采样（temperature 0.7：…）';
    隐藏维度, not 'hidden 为 16' (TERMINOLOGY.md). Every Chinese literal of the course, none with either
    English word as a word."""
    bad = [(str(f), zh[:80]) for f, _, zh in _pairs() if re.search(GLOSSARY_IN_ENGLISH, _without_code(zh))]
    assert not bad, bad


def test_no_chinese_string_says_n_times_fewer():
    """In Chinese, "2.9x fewer bytes" is not '每个词元要读的字节少 2.9 倍': 少 N 倍 is word for word and reads
    as a negative amount; a fraction is 是 X 的 1/N (as chapter 7 says 是前者的 1/11.3). Every Chinese literal."""
    from helpers import FEWER_TIMES
    bad = [(str(f), zh[:80]) for f, _, zh in _pairs() if re.search(FEWER_TIMES, zh)]
    assert not bad, bad


def test_the_fixed_lines_pass():
    assert not chinese_text_problems("\n".join(AFTER))
    assert not chinese_text_problems("提示 2/3：……", hints=True) and chinese_text_problems("提示 2/3：……")


def test_chapter_8_example_is_the_same_in_both_languages(course_en, course_zh):
    """One rule for every chapter (TERMINOLOGY.md): examples do not change with --lang, so chapter 8's
    example sentence is the same in both languages, as chapters 5-7's are."""
    assert "**Example sentences** do not change with `--lang`" in _source("TERMINOLOGY.md")
    en = re.search(r"text: ('.*') -> (\d+) tokens: (.*)", _chapter(course_en, "ch08_model.py"))
    zh = re.search(r"文本：('.*') -> (\d+) 个词元：(.*)", _chapter(course_zh, "ch08_model.py"))
    assert en and zh and en.groups() == zh.groups()


def test_the_judges_chinese_text(judge, tiny_path):
    """'小检查点 配置' and ASCII lists ('（atol=1e-05, rtol=1e-05）', '[3, 16] float32, [16] bfloat16')."""
    from practice._judge.exercises import BY_ID
    from practice._judge.report import report_lines
    from qwen.lang import set_lang
    set_lang("zh")
    wrong = ROOT / "practice" / "_judge" / "wrong"
    lines = []
    for ex, name in (("207", "207_all_dims.py"), ("209", "209_no_scale.py")):
        lines += report_lines(BY_ID[ex], judge.grade(BY_ID[ex], wrong / name, tiny_path))
    text = "\n".join(lines)
    assert "小检查点的配置" in text and "输入：[1, 3, 5, 4] float32、" in text and "atol=1e-05、rtol=" in text, text
    assert not chinese_text_problems(text, hints=True), chinese_text_problems(text, hints=True)


# ---------------------------------------------------------------- the download failure, said once

FALLBACK_TWICE = """
from engine.cli import chapter
chapter("a", "a", argv=[])
chapter("b", "b", argv=[])                                   # a notebook running a second chapter
"""


def test_the_fallback_to_the_tiny_checkpoint_is_explained_once_per_run(run_script):
    r = run_script("-c", FALLBACK_TWICE)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("Qwen/Qwen3.5-0.8B is not in the Hugging Face cache") == 1 and r.stdout.count("built-in tiny") == 1


def test_a_mirror_that_failed_is_not_suggested_again(run_script, monkeypatch):
    r = run_script("main.py", "download", env={"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"})
    assert r.returncode == 1 and "http://127.0.0.1:9 failed" in r.stderr, r.stderr
    assert "use a mirror" not in r.stderr and "check the connection and the address in HF_ENDPOINT" in r.stderr
    from huggingface_hub import constants
    from engine.hub import ModelNotFound, find_model
    with pytest.raises(ModelNotFound) as without:
        find_model()
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(ModelNotFound) as through:
        find_model()
    assert "Through a mirror" in str(without.value) and "Through a mirror" not in str(through.value)
    assert "Already have a folder" in str(through.value)


# ---------------------------------------------------------------- the README's code, anywhere

def test_find_model_reads_qwen_tiny(tiny_path, monkeypatch, tmp_path):
    """The README's blocks call find_model(): with QWEN_TINY=1 (a notebook's first cell) they need no
    real model; a folder given by name still wins."""
    from engine.hub import find_model
    monkeypatch.setenv("QWEN_TINY", "1")
    assert find_model() == tiny_path
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    assert find_model(tmp_path) == tmp_path


NOTEBOOK_ELSEWHERE = """
import torch
from practice import check
def l2norm(x, eps=1e-6):
    h = x.double()
    return (h * torch.rsqrt((h * h).sum(-1, keepdim=True) + eps)).to(x.dtype)
check(205, l2norm, tiny=True)
"""


def test_check_works_from_a_notebook_in_any_folder(run_script, tmp_path):
    """`from practice import check` in a notebook in another folder: qwen, engine and practice on the path
    as `pip install -e .` maps them (here links to them), the learner's files in QWEN_PRACTICE_DIR."""
    import os
    from forkserver import python
    (tmp_path / "site").mkdir()
    for package in ("qwen", "engine", "practice"):
        (tmp_path / "site" / package).symlink_to(ROOT / package, target_is_directory=True)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site"), "PYTHONIOENCODING": "utf-8", "QWEN_PROGRESS": str(tmp_path / "p.json"),
           "QWEN_PRACTICE_DIR": str(tmp_path / "work")}
    cell = f"import linecache\nCELL = {NOTEBOOK_ELSEWHERE!r}\nlinecache.cache['<cell-1>'] = (len(CELL), None, " \
           "CELL.splitlines(True), '<cell-1>')\nexec(compile(CELL, '<cell-1>', 'exec'), {'__name__': '__main__'})\n"
    r = python(["-c", cell], cwd=tmp_path, env=env, timeout=120)     # a process of its own (forked), a cell IPython keeps
    assert r.returncode == 0, r.stderr[-2000:]
    assert "205" in r.stdout and "passed all" in r.stdout, r.stdout


def test_exercise_statements_quote_chinese_with_full_width_marks():
    """208's statement quoted Chinese with ASCII marks ("fp32 计算后舍入"): “...” in Chinese text."""
    bad = [(p.name, m[0]) for p in sorted((ROOT / "practice" / "_judge" / "starters").glob("*.py"))
           for m in re.finditer(r'"[^"\n]*"', ast.get_docstring(ast.parse(p.read_text(encoding="utf-8"))) or "")
           if re.search(r"[\u4e00-\u9fff]", m[0])]                          # "dtype", "shape": code, kept
    assert not bad, bad


def test_ch13_says_what_share_of_the_saving_a_scale_per_32_weights_takes():
    """An fp32 scale per 32 weights (1 bit a weight) takes a quarter of what going from 8 to 4 bits saves
    (8 - 4 = 4 bits), not 'half' (把……省下的一半又还了回去): chapter 13 says a quarter."""
    text = _source("ch13_quantize.py")
    added, saved = 32 / 32, 8 - 4                                   # fp32 scale bits per weight; bits saved
    assert added / saved == 0.25
    assert "per 32 weights 1\n# bit, a quarter of the 4 bits" in text and "是从 8 位降到 4 位省下的 4 位的四分之一" in text
