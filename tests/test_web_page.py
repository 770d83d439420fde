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
