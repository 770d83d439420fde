"""Exercises 230-232 (practice/_judge/exercises/ch08_09.py): each common mistake of a learner study is
failed and named, correct forms pass with no mistake named, and 232 accepts exactly the answers its
statement allows (a mass exactly p, ties at the cut, logits with more than two dimensions)."""
import pytest
import torch

from conftest import ROOT

JUDGE = ROOT / "practice" / "_judge"

NEW_MISTAKES = {  # wrong/ file -> the diagnosis it must be named with (each got only "values differ", or passed)
    "230_mixer_reshaped.py": "mixer_reshaped", "230_mixer_untransposed.py": "mixer_untransposed",
    "230_rms_whole.py": "rms_whole", "230_mlp_reads_norm1.py": "mlp_reads_norm1",
    "231_no_scale.py": "no_scale", "231_kv_order.py": "kv_order", "231_prepended.py": "prepended",
    "232_dim_1.py": "dim_1", "232_probabilities.py": "probabilities", "232_one_too_many.py": "one_too_many",
    "232_keeps_mass_equal_p.py": "one_too_many", "232_drops_crossing.py": "drops_crossing",
}


def _grade(judge, ex_id, file, explain_all=False):
    from practice._judge.grading import grade
    from engine.tiny import tiny_model_path
    return grade(judge.BY_ID[ex_id], tiny_model_path(), file=file, explain_all=explain_all)


def _named(result):
    return {c["diagnosis"]["name"] for c in result["cases"] if c.get("diagnosis")}


def _write(tmp_path, name, body):
    f = tmp_path / name
    f.write_text(body, encoding="utf-8")
    return f


@pytest.mark.parametrize("ex_id", ["230", "231", "232"])
def test_each_wrong_file_fails_named_with_its_mistake_only(judge, ex_id):
    """Each new wrong/ file, and every one of 231's, fails and is named with its own mistake, on no
    case with another. (With one cached token the unshifted mask and the missing new key give the
    same token, and a learner who left out the new key was also told, under that case, that the
    mask was not shifted, which the first case shows to be right.) --verify grades the others."""
    wrong = judge.BY_ID[ex_id].wrong
    assert {n: d for n, d in NEW_MISTAKES.items() if n.startswith(ex_id)}.items() <= wrong.items()
    for name, want in wrong.items():
        if ex_id != "231" and name not in NEW_MISTAKES:
            continue
        result = _grade(judge, ex_id, JUDGE / "wrong" / name)
        line = judge.summary_line(result)
        assert result["status"] == "fail" and _named(result) == {want}, (name, _named(result), line)
        assert "NaN or inf" not in line                            # a -inf is a filtered token in 232, not an overflow


def test_references_and_equivalent_forms_pass_with_no_mistake_named(judge):
    for ex_id in ("230", "231", "232"):
        ex = judge.BY_ID[ex_id]
        for file in [ex.solution] + ex.equivalents():
            result = _grade(judge, ex_id, file, explain_all=True)
            assert result["status"] == "pass" and not _named(result), (file.name, judge.summary_line(result), _named(result))


def test_231_decode_step_without_the_scale_fails_on_enough_rows(judge):
    """The study's mistake: scores never divided by sqrt(head_dim) passed all 3 cases (4 token rows)."""
    result = _grade(judge, "231", JUDGE / "wrong" / "231_no_scale.py")
    failed = [c for c in result["cases"] if not c["ok"]]
    assert len(failed) == 3 and all(c["diagnosis"]["name"] == "no_scale" for c in failed), judge.summary_line(result)
    from practice._judge.exercises import Context
    from engine.tiny import tiny_model_path
    cases = judge.BY_ID["231"].cases(Context(tiny_model_path(), ROOT))
    assert [c.args[2].shape[0] for c in cases] == [64, 16, 8]               # rows (decode steps) per case


def test_231_prepended_cache_is_told_its_token_is_right(judge):
    """A hint never points at a part the result shows right: the token is right, the cache's order is not."""
    result = _grade(judge, "231", JUDGE / "wrong" / "231_prepended.py")
    line = judge.summary_line(result)
    assert "greedy_step[1]" in line and "your token is right" in line, line
    assert all(c["diagnosis"]["name"] == "prepended" for c in result["cases"] if not c["ok"])


REFERENCE_232 = (JUDGE / "solutions" / "s232.py").read_text(encoding="utf-8")


def _case(judge, ex_id, start):
    from practice._judge.exercises import Context
    from engine.tiny import tiny_model_path
    cases = judge.BY_ID[ex_id].cases(Context(tiny_model_path(), ROOT))
    return next(c for c in cases if c.name[0].startswith(start))


def test_232_other_tied_subset_of_the_right_size_passes(judge, tmp_path):
    """Reversing the vocabulary before the reference's sort keeps other tokens of a tie; still right."""
    body = REFERENCE_232.replace("def top_p_filter(logits, p):", "def _reference(logits, p):") + (
        "\n\ndef top_p_filter(logits, p):\n"
        "    return _reference(logits.flip(-1), p).flip(-1)\n")
    f = _write(tmp_path, "mine.py", body)
    result = _grade(judge, "232", f, explain_all=True)
    assert result["status"] == "pass" and not _named(result), judge.summary_line(result)
    ns = {}
    exec(compile(body, "mine", "exec"), ns)                           # noqa: S102 - the test's own code
    for start in ("4 equal logits", "8 equal logits"):                 # the tie cases really keep other tokens
        case = _case(judge, "232", start)
        assert not torch.equal(ns["top_p_filter"](*case.args), case.expected), start


def test_232_wrong_number_of_tied_tokens_fails(judge, tmp_path):
    """Keeping every token of a tie at the cut (all 4 where the rule keeps 2 of them) is a wrong
    answer, though each token it keeps is as likely as a right one."""
    body = ("import torch\n"
            "def top_p_filter(logits, p):\n"
            "    ordered, order = logits.sort(dim=-1, descending=True)\n"
            "    probs = ordered.softmax(dim=-1)\n"
            "    before = probs.cumsum(dim=-1) - probs\n"
            "    cut = ordered.masked_fill(before >= p, float('inf')).min(-1, keepdim=True).values\n"
            "    return logits.masked_fill(logits < cut, float('-inf'))\n")   # keep all equal to the last kept
    result = _grade(judge, "232", _write(tmp_path, "mine.py", body))
    failing = [c["name"] for c in result["cases"] if not c["ok"]]
    assert result["status"] == "fail" and any("equal logits" in n for n in failing), failing
    assert "keeps" in judge.summary_line(result) and "the rule keeps" in judge.summary_line(result)


def test_232_mass_exactly_p_is_enough(judge, tmp_path):
    """p = 0.875 and probabilities 1/2, 1/4, 1/8, 1/16, ...: the first three hold exactly p in fp32,
    so the fourth is dropped; `before > p` keeps it and is named; an fp64 computation still passes."""
    case = _case(judge, "232", "probabilities 1/2")
    probs = case.args[0].softmax(-1)
    assert probs.sort(-1, descending=True).values[:, :3].sum(-1).tolist() == [0.875, 0.875]    # exact in fp32
    kept = (case.expected != float("-inf")).sum(-1).tolist()
    assert kept == [3, 3], kept
    result = _grade(judge, "232", JUDGE / "wrong" / "232_keeps_mass_equal_p.py")
    bad = [c for c in result["cases"] if not c["ok"]]
    assert [c["name"] for c in bad] == [case.name[0], _case(judge, "232", "8 equal logits").name[0]], bad
    assert all(c["diagnosis"]["name"] == "one_too_many" for c in bad)
    fp64 = REFERENCE_232.replace("probs = ordered.softmax(dim=-1)", "probs = ordered.double().softmax(dim=-1)")
    assert fp64 != REFERENCE_232
    result = _grade(judge, "232", _write(tmp_path, "fp64.py", fp64), explain_all=True)
    assert result["status"] == "pass" and not _named(result), judge.summary_line(result)


def test_232_statement_states_the_exact_p_and_tie_rules(judge):
    statement = judge.BY_ID["232"].starter.read_text(encoding="utf-8").split('"""')[1]
    for part in ("Exactly p: when the first n tokens hold exactly p, they are the set", "not below p, so it is dropped",
                 "any of them\nmay be kept, as long as their number is right", "more than two dimensions",
                 "atol=0, rtol=0", "正好等于 p", "并列", "只要数量对"):
        assert part in statement, part


def test_minus_inf_where_the_output_may_be_minus_inf_is_a_wrong_value_not_nan_or_inf():
    """-inf is a filtered logit: one in the wrong place "differs", it is not "NaN or inf in your output";
    where the expected output has no -inf at all, a -inf is still reported as NaN or inf."""
    from practice._judge.compare import Mismatch, check_tensor
    inf = float("inf")
    with pytest.raises(Mismatch) as m:
        check_tensor(torch.tensor([1.0, -inf, 2.0]), torch.tensor([-inf, -inf, 2.0]))
    assert m.value.summary == "values differ" and m.value.detail["first_index"] == [0]
    with pytest.raises(Mismatch) as m:
        check_tensor(torch.tensor([1.0, -inf]), torch.tensor([1.0, 3.0]))       # a -inf missed: off by inf, not 0
    assert m.value.summary == "values differ" and m.value.detail["max_abs"] == inf
    with pytest.raises(Mismatch) as m:
        check_tensor(torch.tensor([1.0, 2.0]), torch.tensor([-inf, 2.0]))
    assert m.value.summary.startswith("NaN or inf in your output at index [0]")
    check_tensor(torch.tensor([1.0, -inf]), torch.tensor([1.0, -inf]))         # right, -inf included
