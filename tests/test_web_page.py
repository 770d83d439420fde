"""What the judge writes for other programs (`--json`, the page's replies, the progress file) is strict
JSON, and the page's exercise view reads as a learner needs it: in one language, with the exercise's own
chapter, statements reflowed, and the editor opened on the function to fill in."""
import json

import pytest

from test_web import ask, learner, web  # noqa: F401 - `web` is the served page's fixture

# A learner's first try at 232: the logits returned unfiltered. Its failing cases compare against -inf.
RETURNS_LOGITS = "import torch\n\n\ndef top_p_filter(logits, p):\n    return logits\n"


def strict(text):
    """json.loads that refuses Infinity, -Infinity and NaN, as JSON.parse in a browser does."""
    def refuse(name):
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


def leaves(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from leaves(v)
    else:
        yield value


def test_judge_json_of_a_failing_232_is_strict_json_with_inf_as_a_string(judge, capsys, tmp_path):
    wrong = tmp_path / "mine_232.py"
    wrong.write_text(RETURNS_LOGITS, encoding="utf-8")
    code = judge.main(["232", "--json", "--tiny", "--file", str(wrong)])
    out = capsys.readouterr().out
    results = strict(out)                                        # raised on "-Infinity" before
    assert code == 1 and results[0]["status"] == "fail"
    assert "-inf" in list(leaves(results)), "the expected -inf is shown as the string -inf"


def test_the_pages_run_reply_for_a_failing_232_is_strict_json(web, judge):  # noqa: F811 - the fixture
    path = learner(judge, "232")
    status, ex = ask(web, "GET", "/api/exercise/232")
    assert status == 200
    status, _ = ask(web, "POST", "/api/exercise/232/save", {"text": RETURNS_LOGITS, "digest": ex["digest"]})
    assert status == 200 and path.read_text(encoding="utf-8") == RETURNS_LOGITS
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=60)
    conn.request("POST", "/api/exercise/232/run?lang=en", body=b"",
                 headers={"Host": f"127.0.0.1:{web.port}", "X-Token": web.token, "Content-Type": "application/json"})
    r = conn.getresponse()
    body = r.read().decode("utf-8")
    conn.close()
    reply = strict(body)                                         # the browser's JSON.parse failed on it before
    assert r.status == 200 and reply["status"] == "fail"
    detail = next(c["detail"] for c in reply["cases"] if not c["ok"] and c["detail"])
    assert "-inf" in list(leaves(detail)), detail


def test_the_progress_file_is_strict_json(judge, tmp_path):
    from practice._judge import progress

    def change(p):
        p["232"] = {"status": "fail", "seen": [float("inf"), float("-inf"), float("nan"), 0.5]}
    progress.update(change)
    saved = strict((tmp_path / "progress.json").read_text(encoding="utf-8"))
    assert saved["232"]["seen"] == ["inf", "-inf", "nan", 0.5]


def test_non_finite_floats_are_named_and_nothing_else_changes():
    from practice._judge.jsontext import dumps
    value = {"a": [1, 2.5, float("nan"), (float("inf"), -float("inf"))], "b": "x", "c": None, "d": True}
    assert strict(dumps(value)) == {"a": [1, 2.5, "nan", ["inf", "-inf"]], "b": "x", "c": None, "d": True}


# ------------------------------------------------------------------------------------------ the exercise view

def test_the_list_shows_each_exercise_own_chapter(web):  # noqa: F811 - the fixture
    status, listing = ask(web, "GET", "/api/list")
    chapters = {r["id"]: r["chapter"] for r in listing["exercises"]}
    assert status == 200
    expected = {"201": "1", "203": "2", "204": "3", "207": "4", "209": "6", "230": "8", "232": "9", "240": "10",
                "242": "11", "260": "13", "270": "14", "272": "14", "273": "16"}
    assert {k: chapters[k] for k in expected} == expected


def test_the_exercise_header_has_the_difficulty_in_both_languages(web):  # noqa: F811 - the fixture
    """The page switches language without asking again: it needs both words, as for the title."""
    status, ex = ask(web, "GET", "/api/exercise/242")
    assert status == 200 and ex["chapter"] == "11"
    assert ex["level"] == {"en": "medium", "zh": "中等"}
    status, zh = ask(web, "GET", "/api/exercise/232", lang="zh")
    assert zh["level"] == {"en": "easy", "zh": "简单"}


def test_the_editor_opens_on_the_first_line_of_the_function_to_fill_in(web, judge):  # noqa: F811 - the fixture
    from practice._judge.exercises import EXERCISES
    for ex_id in [e.id for e in EXERCISES]:
        status, ex = ask(web, "GET", f"/api/exercise/{ex_id}")
        lines = ex["text"].splitlines()
        n = ex["start_line"]
        defs = [i for i, line in enumerate(lines, 1) if line.startswith("def ")]
        assert status == 200 and defs and defs[0] < n <= len(lines), (ex_id, n, defs)
        assert lines[n - 1].startswith("    ") and lines[n - 1].strip(), (ex_id, lines[n - 1])
    mine = "import torch\n\n\ndef helper(x):\n    return x\n\n\ndef top_p_filter(logits, p):\n    \"\"\"Mine.\"\"\"\n" \
           "    kept = logits\n    return kept\n"
    learner(judge, "232").write_text(mine, encoding="utf-8")
    status, ex = ask(web, "GET", "/api/exercise/232")
    assert ex["text"].splitlines()[ex["start_line"] - 1] == "    kept = logits"      # its function, past its docstring
    learner(judge, "232").write_text(mine.replace("    return kept", "    return kept)"), encoding="utf-8")
    status, ex = ask(web, "GET", "/api/exercise/232")
    assert status == 200 and ex["start_line"] == 9                   # a syntax error: the line after its def


@pytest.mark.parametrize("ex_id, lang, joined", [
    ("203", "en", "return the rows of the table E for them, shape ids.shape"),   # a hanging indent
    ("206", "en", "Statistics in fp32, result cast back"),
    ("207", "zh", "只有 rotary_dim = int(head_dim"),                              # and a space beside Latin
    ("260", "en", "maps to +-127. A row of zeros"),                               # a list item's second line
    ("208", "zh", "sigmoid(z) 其中 gate(x)"),
])
def test_statements_are_reflowed_mid_sentence(ex_id, lang, joined):
    from practice._judge.exercises import BY_ID
    from practice._judge.web import statement
    assert any(joined in p for p in statement(BY_ID[ex_id])[lang]), (ex_id, lang)


@pytest.mark.parametrize("ex_id, lang, own", [
    ("205", "en", "\n  y = x / sqrt(sum(x^2) + eps)\nwith eps"),                   # a formula
    ("220", "en", "\n  1. decay:  S = S * exp(g)\n  2. read:"),                     # a list
    ("201", "zh", "\n  header      {名字"),                                         # a table's rows
    ("242", "en", "\n  - a text token gets (p, p, p)"),
])
def test_statements_keep_formulas_lists_and_tables_on_their_lines(ex_id, lang, own):
    from practice._judge.exercises import BY_ID
    from practice._judge.web import statement
    assert any(own in p for p in statement(BY_ID[ex_id])[lang]), (ex_id, lang)
