"""Checkpoints for tests, written by transformers itself (so tests see the layouts learners meet).

    write_transformers_checkpoint(folder, layout="text", dtype=torch.float32, tied=False)

`layout="text"`: a flat config.json and `Qwen3_5ForCausalLM` keys (`model.layers.*`, a top-level
`lm_head.weight` when untied), as a text-only export writes them. `layout="multimodal"`: the
nested config and `Qwen3_5ForConditionalGeneration` keys (`model.language_model.*`,
`model.visual.*`, and transformers' `preprocessor_config.json` for its patch size), the layout of
the released checkpoints. The model is tiny (hidden 16, 4
layers: 3 linear-attention, 1 full-attention) and seeded, so every run writes the same bytes.
`extra` adds tensors the course does not know (e.g. a rotary `inv_freq` buffer, a layer beyond
the config). `tokenizer=True` copies the built-in tiny checkpoint's tokenizer files (they need
vocab_size >= 248320). Returns the folder; skips the test when transformers is not installed.
"""
import re
import signal
from pathlib import Path

import pytest
import torch

TEXT = dict(vocab_size=512, hidden_size=16, intermediate_size=32, num_hidden_layers=4,
            num_attention_heads=2, num_key_value_heads=1, head_dim=16, linear_conv_kernel_dim=4,
            linear_key_head_dim=8, linear_value_head_dim=8, linear_num_key_heads=2,
            linear_num_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6)
VISION = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=16,
              patch_size=4, num_position_embeddings=16, spatial_merge_size=2, temporal_patch_size=2)


def write_transformers_checkpoint(folder, layout="text", dtype=torch.float32, tied=False,
                                  vocab_size=512, extra=None, tokenizer=False):
    transformers = pytest.importorskip("transformers")
    from transformers.models.qwen3_5 import configuration_qwen3_5 as conf

    folder = Path(folder)
    torch.manual_seed(0)
    text = dict(TEXT, vocab_size=vocab_size, tie_word_embeddings=tied)
    if layout == "text":
        config = conf.Qwen3_5TextConfig(**text)
        model = transformers.Qwen3_5ForCausalLM(config)
    elif layout == "multimodal":
        config = conf.Qwen3_5Config(text_config=text, vision_config=VISION, tie_word_embeddings=tied)
        model = transformers.Qwen3_5ForConditionalGeneration(config)
    else:
        raise ValueError(f"layout must be 'text' or 'multimodal', not {layout!r}")
    model.to(dtype).save_pretrained(folder)
    if layout == "multimodal":                   # a multimodal export ships its image settings (patch 4 here)
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
        Qwen2VLImageProcessorPil(patch_size=VISION["patch_size"], temporal_patch_size=VISION["temporal_patch_size"],
                                 merge_size=VISION["spatial_merge_size"],
                                 size={"shortest_edge": 32 * 32, "longest_edge": 64 * 64}).save_pretrained(folder)
    if extra:
        from safetensors.torch import load_file, save_file
        file = folder / "model.safetensors"
        tensors = {**load_file(file), **{k: v.to(dtype).contiguous() for k, v in extra.items()}}
        save_file(tensors, file, metadata={"format": "pt"})
    if tokenizer:
        from engine.tiny import write_tokenizer_files
        write_tokenizer_files(folder)
    return folder


def sigint_as_in_a_terminal():
    """preexec_fn for a child a test sends Ctrl-C (SIGINT): SIGINT as a terminal gives it, not as pytest got it.
    A shell without job control (`pytest ... &`, nohup, some CI steps) starts pytest with SIGINT ignored;
    an ignored signal stays ignored through exec, so the child's Python sets up no KeyboardInterrupt and
    the test's Ctrl-C does nothing (test_chat's Ctrl-C test would wait 100 s for the reply to stop, and fail)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def edit_after_grading(monkeypatch, judge, text, path=None):
    """Make practice.judge.grade write `text` into `path` (default: the file it graded) once it has graded,
    as an editor saving during a grading would: what was graded is then no longer what is on disk."""
    graded = judge.grade

    def grade_then_edit(ex, file, model, **kw):
        result = graded(ex, file, model, **kw)
        (path or file).write_text(text, encoding="utf-8")
        return result
    monkeypatch.setattr(judge, "grade", grade_then_edit)


CJK = r"[\u4e00-\u9fff]"
GLOSSARY_IN_ENGLISH = r"(?<![-_])\b(temperature|hidden)(?= [\d{为是])"    # 温度, 隐藏维度 as words, not --options
FEWER_TIMES = r"(?<![至最不])[少小低]了? ?(\d[\d.,]*|\{[^}]*\}) ?倍"      # 少 2.9 倍: "2.9x fewer" word for word
CHINESE_TEXT_RULES = {             # TERMINOLOGY.md, "Rules for the Chinese text": what each kind looks like
    "', ' between items (use 、 or ，)": r"(?<=\S), (?=\S)",
    "a space between two Chinese words": CJK + " " + CJK,
    "是/否 after '=' or a formula": r"= [是否]|== [^，；：]*：[是否]",
    "an English word": r"\b(head|heads|nats|vs|ms)\b|(?<!logit )\blens\b|" + GLOSSARY_IN_ENGLISH,
    "N 倍 for a fraction (是 X 的 1/N)": FEWER_TIMES,
}


def _without_code(line):
    """The line with quoted strings and bracketed code ('x', [3, 16], (m, n)) each replaced by X."""
    line = re.sub(r"'[^']*'|\"[^\"]*\"", "X", line)
    previous = None
    while previous != line:                                     # innermost brackets first
        previous, line = line, re.sub(r"\([^()]*\)|\[[^\[\]]*\]", "X", line)
    return line


def chinese_text_problems(text, hints=False):
    """(kind, line) for every Chinese line that breaks one of TERMINOLOGY.md's rules for Chinese text.

    hints: the text may use 提示 (the judge's hints); elsewhere 提示 would be a prompt, 提示词."""
    problems = []
    for line in text.splitlines():
        if not re.search(CJK, line):
            continue
        if re.search(CJK + r"[,;:!?(]|[,;:!?)]" + CJK + r"|" + CJK + r"\s\(", line):
            problems.append(("ASCII punctuation next to Chinese", line))
        bare = _without_code(line)
        problems += [(kind, line) for kind, pattern in CHINESE_TEXT_RULES.items() if re.search(pattern, bare)]
        if re.search(r"(?<!/ )RMS(?!Norm|\(|\^)", line):                  # RMS(h), RMS^2, |mu| / RMS: formulas
            problems.append(("RMS as a word (均方根)", line))
        if not hints and re.search(r"提示(?!词)", line):
            problems.append(("提示 for a prompt (提示词)", line))
    return problems


def run_as_a_cell(source, name, namespace):
    """exec `source` as a notebook cell: IPython keeps each cell's text in linecache under a name of its own,
    which is where inspect.getsource (and so check(), which sends a function's source) finds it."""
    import linecache
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    exec(compile(source, name, "exec"), namespace)
    return namespace


def frame_writer(frame):
    """A 205 solution that writes the bytes `frame` to every pipe or socket it holds (its result pipe among
    them), then leaves without a result: how a hostile solution speaks to the judge in the judge's format."""
    return f"""import os, stat
def l2norm(x, eps=1e-6):
    for fd in range(3, 256):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode) or stat.S_ISSOCK(os.fstat(fd).st_mode):
                os.write(fd, {frame!r})
        except OSError:
            pass
    os._exit(0)
"""
