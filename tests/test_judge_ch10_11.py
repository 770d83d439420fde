"""Exercises 240-241 (practice/_judge/exercises/ch10_11.py): each known mistake fails and is named with
its own diagnosis on every case it fails, the references and equivalent forms pass with none named,
and the cases are the ones the statements describe."""
import pytest

from conftest import ROOT

JUDGE = ROOT / "practice" / "_judge"


def _grade(judge, ex_id, file, explain_all=False):
    from practice._judge.grading import grade
    from engine.tiny import tiny_model_path
    return grade(judge.BY_ID[ex_id], tiny_model_path(), file=file, explain_all=explain_all)


def _named(result):
    return {c["diagnosis"]["name"] for c in result["cases"] if c.get("diagnosis")}


@pytest.mark.parametrize("ex_id", ["240", "241"])
def test_each_wrong_file_fails_named_with_its_mistake_only(judge, ex_id, tmp_path):
    """Named on every failing case, except where two known mistakes give the same result (ambiguous_cases)."""
    from test_judge_exercises import assert_named_only
    wrong = judge.BY_ID[ex_id].wrong
    assert len(wrong) >= 4
    for name, want in wrong.items():
        result = _grade(judge, ex_id, JUDGE / "wrong" / name)
        assert_named_only(judge, ex_id, name, want, result, tmp_path)


@pytest.mark.parametrize("ex_id", ["240", "241"])
def test_references_and_equivalent_forms_pass_with_no_mistake_named(judge, ex_id):
    ex = judge.BY_ID[ex_id]
    assert ex.equivalents()
    for file in [ex.solution] + ex.equivalents():
        result = _grade(judge, ex_id, file, explain_all=True)
        assert result["status"] == "pass" and not _named(result), (file.name, judge.summary_line(result))


def test_240_cases_reach_every_branch(judge, tmp_path):
    """Plain rounding, both bounds, the max(factor, ...) floor, and rounding that alone crosses a bound."""
    from practice._judge.exercises import Context
    from qwen.image import smart_resize
    from engine.tiny import tiny_model_path
    cases = judge.BY_ID["240"].cases(Context(tiny_model_path(), tmp_path))
    branches = set()
    for c in cases:
        height, width, factor, low, high = c.args
        h0, w0 = round(height / factor) * factor, round(width / factor) * factor
        branch = "over" if h0 * w0 > high else "under" if h0 * w0 < low else "within"
        crossed = branch != "within" and low <= height * width <= high
        branches |= {branch, "crossed " + branch if crossed else branch}
        assert c.expected == smart_resize(*c.args) and all(type(v) is int for v in c.expected)
        assert factor in (h := c.expected[0], w := c.expected[1]) or (h % factor == 0 and w % factor == 0)
    assert branches == {"within", "over", "under", "crossed over", "crossed under"}, branches
    assert any(c.expected[1] == c.args[2] for c in cases)                        # a side kept at factor


def test_241_merge_block_rows_are_the_ones_the_merger_joins(judge, tmp_path):
    """Rows 4k .. 4k + 3 are one 2 x 2 block: reshaping to (blocks, 4 * row) puts neighbours together."""
    import torch
    from practice._judge.exercises import Context
    from engine.tiny import tiny_model_path
    case = judge.BY_ID["241"].cases(Context(tiny_model_path(), tmp_path))[0]
    frames, P, T, m = case.args
    rows = case.expected
    top_left_block = frames[:, :, :2 * P, :2 * P]                                # (T, C, 2P, 2P)
    patches = [top_left_block[:, :, i * P:(i + 1) * P, j * P:(j + 1) * P].transpose(0, 1).flatten()
               for i in range(2) for j in range(2)]
    assert torch.equal(rows[:4], torch.stack(patches))
