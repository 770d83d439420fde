"""The claims of chapters 1-12, read from the variables each chapter computes (not grepped from its text).

A chapter computes a number, names it, then prints it (one line = one claim). Here the numbers come
from the whole-course run that tests/test_chapters.py reads (`python main.py --lang en`, on the tiny
checkpoint, with every chapter's defaults): conftest's course_namespaces keeps the plain values each
chapter named, and the claim is checked on the number itself, whatever language or format prints it.
Every chapter also says where the code it teaches is (`taught`, from engine/cli.py show_code), and
that place must be the code's own def or class line.
"""
import math
import sys

import pytest

from conftest import COURSE_EN, ROOT, course_namespaces


@pytest.fixture(scope="session")
def chapter_run(course_en):
    """chapter_run(n) -> (namespace, stdout) of chapter n in the session's whole-course run: its
    named values (conftest.course_namespaces) and its part of the output. The chapters run once for
    the course's tests; running them again here would cost about 10 s of CPU (more where xdist's two
    workers each ran some)."""
    out, spaces = course_en, course_namespaces(*COURSE_EN)

    def run(n):
        start = out.index("# " + next(ROOT.glob(f"ch{n:02d}_*.py")).name)
        end = out.find("\n# ch", start + 1)
        return spaces[n], out[start:end if end > 0 else None]
    return run


@pytest.mark.parametrize("n", range(1, 13))
def test_each_chapter_says_where_the_code_it_teaches_is(chapter_run, n):
    ns, out = chapter_run(n)
    assert ns["taught"], "the chapter shows no code"
    for name, file, line in ns["taught"]:
        text = (ROOT / file).read_text(encoding="utf-8").splitlines()[line - 1]
        if file == name.replace(".", "/") + ".py":             # a whole lesson file: from its first line
            assert line == 1 and text.startswith('"""'), (file, line, text)
        else:
            assert text.lstrip().startswith((f"def {name.split('.')[-1]}(", f"class {name.split('.')[-1]}")), (file, line, text)
        assert f"{name} {file}:{line}" in out                  # the command line's one line: name file:line


def test_a_whole_lesson_file_is_shown_as_it_is(tiny_path, capsys):
    import inspect
    import qwen.norm
    from engine.cli import chapter, show_code
    ch = chapter("t", "t", argv=["--tiny", "--code"])
    place = show_code(ch, qwen.norm)
    out = capsys.readouterr().out
    assert place == [("qwen.norm", "qwen/norm.py", 1)]
    assert "# qwen/norm.py:1  qwen.norm" in out and inspect.getsource(qwen.norm) in out


def test_code_option_prints_the_source_from_the_module(tiny_path, capsys):
    import inspect
    from engine.cli import chapter, show_code
    from qwen.norm import RMSNorm
    ch = chapter("t", "t", argv=["--tiny", "--code"])
    place = show_code(ch, RMSNorm)
    out = capsys.readouterr().out
    assert f"# qwen/norm.py:{place[0][2]}  RMSNorm" in out and inspect.getsource(RMSNorm) in out


def test_ch01_weights_claims(chapter_run):
    ns, _ = chapter_run(1)
    assert ns["same"] and ns["start"] == 8 + ns["n"] + ns["begin"] and (8 + ns["n"]) % 8 == 0   # the header read by hand
    assert 0 <= ns["padding"] < 8 and ns["stop"] > ns["start"]                 # padded to a multiple of 8 only
    assert ns["up"] == 2 ** -7 and ns["down"] == 2 ** -8 and ns["up_log"] == -7 and ns["down_log"] == -8
    assert abs(ns["digits"] - 2.408) < 1e-3 and ns["largest"] > 3e38                # fp32's range, 8 bits
    assert ns["sign"] + ns["exponent"] + ns["mantissa"] == ns["bits"] and len(ns["mantissa"]) == 7
    assert 0 < ns["embed_share"] < 1 and ns["nl"] + ns["nf"] == ns["cfg"].num_hidden_layers


def test_ch02_embedding_claims(chapter_run):
    ns, _ = chapter_run(2)
    assert ns["round_trip"] and ns["n_ids"] == len(ns["ids"]) and (ns["bmp"], ns["beyond"]) == (3, 4)
    assert ns["N_BPE"] + ns["n_special"] == 248077 and ns["blocks"] * 256 == ns["ROWS"]     # Qwen3.5's vocabulary
    assert ns["lo"] <= ns["median"] <= ns["hi"] and abs(ns["flat"] - math.log(ns["N_BPE"])) < 1e-4
    assert abs(ns["second"] - math.exp(-ns["gap"])) < 1e-4                  # the second's share: e^-(gap)


def test_ch03_norm_claims(chapter_run):
    ns, _ = chapter_run(3)
    assert ns["after"] == [1.0, 1.0, 1.0] and all(b > 3 for b in ns["before"]) and ns["direction"] > 0.999999
    assert ns["hand4"] == ns["module4"] == [0.3651, 0.7303, 1.0954, 1.4606]
    assert abs(ns["inside"] - 0.5 ** 0.5) < 1e-3 and ns["outside"] > 0.99      # eps inside the root matters
    assert ns["lost"] == 1.0 and ns["kept"] != 0 and ns["differ"]["exact"] == 0
    assert ns["e16"] > ns["e32"] and ns["identity_gap"] < 1e-4 and ns["lengths"] == [1.0, 1.0, 1.0]
    assert ns["total"] == ns["stream"] + ns["qk"] + ns["gated_n"] and ns["zero_after"] == [0.0, 0.0, 0.0]


def test_ch04_rope_claims(chapter_run):
    ns, _ = chapter_run(4)
    assert abs(ns["score_at_2"] - ns["score_at_7"]) > 1e-4            # RoPE sees where k stands
    assert ns["rest_unchanged"] and ns["length_change"] < 1e-5        # partial rotation; lengths kept
    assert ns["spread"] < 1e-4 and ns["spread_exact"] < 1e-12         # only m - n matters (fp32 / float64)
    assert len(set(round(s, 6) for s in ns["other_distances"])) == 3
    assert ns["text_gap"] == 0 and ns["grid_gap"] > 0.1               # mrope = plain RoPE for text only
    assert ns["bf16_error"] > 1                                       # radians: why angles are fp32


def test_ch05_mlp_claims(chapter_run):
    ns, _ = chapter_run(5)
    cfg = ns["cfg"]
    assert ns["same"] and ns["wrong_gap"] > 1e-3 * ns["largest"]
    assert ns["per"] == 3 * cfg.hidden_size * cfg.intermediate_size and ns["mlps"] == cfg.num_hidden_layers * ns["per"]
    assert ns["real_per"] == 3 * 1024 * 3584                          # Qwen3.5-0.8B, from its inventory
    assert abs(ns["silu_min"] + 0.2785) < 1e-4 and abs(ns["silu_min_at"] + 1.2785) < 1e-3


def test_ch06_attention_claims(chapter_run):
    ns, _ = chapter_run(6)
    assert ns["row_sum_error"] < 1e-6 and ns["future_is_zero"] and ns["first_weight"] == 1.0
    assert ns["hand_gap"] < 1e-2 and ns["gate_effect"] > 10 * ns["hand_gap"]
    assert ns["sdpa_gap"] < 1e-5 and ns["cache_gap"] < 1e-2


def test_ch07_deltanet_claims(chapter_run):
    ns, _ = chapter_run(7)
    assert abs(ns["plain_reads"] - 2) < 1e-5 and abs(ns["delta_reads"] - 1) < 1e-5
    assert ns["read_back_error"] < 1e-5
    assert ns["changed"] == [10, 11, 12, 13]                          # a 4-tap causal conv: token 10 and 3 after
    assert ns["first_token_ok"] and ns["cached_gap"] < 1e-4
    assert ns["output_gap"] < 1e-4 and ns["state_gap"] < 1e-4        # recurrent == chunked


def test_ch08_model_claims(chapter_run):
    ns, _ = chapter_run(8)
    assert ns["lens_gap"] == 0 and ns["hand_gap"] < 1e-4
    assert math.isfinite(ns["growth"]) and ns["yours"] is None       # no --mine: the course's parts


def test_ch09_generate_claims(chapter_run):
    ns, _ = chapter_run(9)
    assert ns["cache_gap"] < 1e-4
    assert ns["loop_agrees"] and ns["by_hand"] == ns["library"] == ns["reply_ids"]   # the dozen-line loop
    assert ns["sampled_agrees"] and ns["sampled_by_hand"] == ns["sampled_library"]   # and with a seeded draw
    assert ns["sampled_by_hand"] != ns["by_hand"]                     # the draw is not the greedy reply
    assert ns["repeatable"]
    # section 6's sampled loop is checked against section 4's first draw (no second library run), its length
    assert ns["sampled_library"] == ns["drawn_ids"][0] == ns["drawn_ids"][1] != ns["drawn_ids"][2]
    assert len(ns["sampled_by_hand"]) == ns["settings"]["max_new_tokens"] == 16
    # section 3 looks into section 2's cache (no replay): it held the prompt and the reply but its last token
    assert ns["held_before"] == len(ns["ids"]) + len(ns["reply_ids"]) - 1 and ns["read"] == ns["ids"] + ns["reply_ids"]



def test_ch09_in_a_notebook_after_an_interrupted_reply(tiny_path):
    """Section 3 continues section 2's cache by one step. Interrupted in a notebook (a KeyboardInterrupt
    arrives inside a layer), that cache is half-written while its length still says whole: continuing it
    would print "cached decoding = reading everything again: max |difference| = 5.0e-01", and section 6
    would find its loop "wrong" against the cut reply. Both notice and read again; run whole, section 3
    looks into the reply's own cache, and its cell runs again the same."""
    import contextlib
    import io
    import re
    import torch
    text = (ROOT / "ch09_generate.py").read_text(encoding="utf-8")
    cells = [c for c in re.split(r"^# %%.*$", text, flags=re.M) if c.strip() and not c.lstrip().startswith("#")]
    ns, out = {"__name__": "__main__"}, io.StringIO()
    argv, grad, threads = sys.argv, torch.is_grad_enabled(), torch.get_num_threads()
    sys.argv = ["ch09_generate.py", "--tiny", "--lang", "en", "--max-new-tokens", "6"]

    def run(marker):
        [cell] = [c for c in cells if marker in c]
        exec(compile(cell, "cell", "exec"), ns)

    def stop(module, args, calls=[]):                                 # the 4th call: the reply's 3rd step
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
    try:
        with contextlib.redirect_stdout(out):
            for cell in cells:                                          # as Jupyter runs them, in order
                if "section(2," not in cell:
                    exec(compile(cell, "cell", "exec"), ns)
                    continue
                hook = ns["model"].layers[-1].register_forward_pre_hook(stop)
                with pytest.raises(KeyboardInterrupt):
                    exec(compile(cell, "cell", "exec"), ns)
                hook.remove()
            assert len(ns["reply_ids"]) == 3 and ns["cache_gap"] < 1e-4, ns["cache_gap"]   # a half-written cache: 0.5
            assert ns["loop_agrees"] and ns["library"] != ns["reply_ids"]          # not the cut reply
            assert not ns["reply_whole"] and "one more step from a new cache, which held 32 tokens" in out.getvalue()
            assert "(section 2 was stopped before its end: its cache may be half-written" in out.getvalue()
            run("section(2,")
            gaps = []
            for _ in range(2):                                           # the cell again: the same
                run("section(3,")
                gaps.append((ns["held_before"], ns["cache_gap"]))
            assert ns["reply_whole"] and gaps[0] == gaps[1] and gaps[0][0] == len(ns["ids"]) + 5
            assert gaps[0][1] < 1e-4 and out.getvalue().count("one more step from the reply's cache") == 2
    finally:
        sys.argv = argv
        torch.set_grad_enabled(grad)                                   # chapter 9 turns gradients off
        torch.set_num_threads(threads)

def test_ch10_ch11_vision_claims(chapter_run):
    ns, _ = chapter_run(10)
    assert ns["conv_gap"] < 1e-4 and ns["library_gap"] < 1e-4
    ns, _ = chapter_run(11)
    assert ns["picture_effect"] > 0 and ns["cache_gap"] < 1e-4


def test_ch12_mtp_claims(chapter_run):
    ns, _ = chapter_run(12)
    assert ns["hand_gap"] < 1e-4 and ns["speculative_is_greedy"]


def test_a_notebook_shows_the_code_without_asking(tiny_path, monkeypatch, capsys):
    import inspect
    import types
    from engine.cli import chapter, show_code
    from qwen.mlp import MLP
    shown = []
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    try:
        import IPython.display
        monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj.data))
    except ImportError:                                                # printed instead
        pass
    ch = chapter("t", "t", argv=["--tiny"])
    show_code(ch, MLP)
    text = "".join(shown) + capsys.readouterr().out
    assert inspect.getsource(MLP).strip() in text and "(--code prints it)" not in text


def test_the_where_line_in_chinese(tiny_path, capsys):
    from helpers import chinese_text_problems
    from engine.cli import chapter, show_code
    from qwen.lang import set_lang
    from qwen.rope import apply_rope
    ch = chapter("t", "t", argv=["--tiny", "--lang", "zh"])
    place = show_code(ch, apply_rope)[0]
    set_lang("en")
    out = capsys.readouterr().out.splitlines()[-1]
    assert out == f"  本章所讲的代码：apply_rope {place[1]}:{place[2]}（--code 打印出来）"
    assert chinese_text_problems(out) == []
