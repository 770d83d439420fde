"""practice/judge.py --web: the page's server (practice/_judge/web.py), through plain HTTP.

Every refused request is sent with the standard library and checked twice: the refusal, and that
nothing ran (no judge action, no file created or written, no progress recorded). The rest: the
page's list is the terminal's, saves are atomic and never lose text, Run / Hint / Solution / Reset
are the judge's own (same report, same files, same progress), and a hanging solution gets its
verdict while the server keeps answering."""
import argparse
import http.client
import json
import threading
import time

import pytest

from conftest import ROOT

SOLUTIONS = ROOT / "practice" / "_judge" / "solutions"
REFERENCE = (SOLUTIONS / "s204.py").read_text(encoding="utf-8")
NO_ONE_PLUS = REFERENCE.replace("(1.0 + weight.float())", "weight.float()")     # the scenario's wrong solution
assert NO_ONE_PLUS != REFERENCE


@pytest.fixture
def web(judge, tiny_path):
    """A served page on 127.0.0.1 (a free port), in this process, with the judge's temp folders."""
    from practice._judge import web as webmod
    args = argparse.Namespace(tiny=False, model=str(tiny_path), debug=False, file=None, port=0, no_browser=True,
                              lang=None)
    server, app = webmod.make_server(judge, args)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    app.server = server
    yield app
    server.shutdown()
    server.server_close()


def ask(app, method, path, body=None, token=True, headers=None, lang="en", raw=None):
    """(status, JSON or bytes) of one request; token=True: the right token, a string: that one, None: none."""
    conn = http.client.HTTPConnection("127.0.0.1", app.port, timeout=30)
    hdrs = {"Host": f"127.0.0.1:{app.port}"}
    if token is True:
        hdrs["X-Token"] = app.token
    elif token:
        hdrs["X-Token"] = token
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    if data is not None or method == "POST":
        hdrs["Content-Type"] = "application/json"
    hdrs.update(headers or {})
    sep = "&" if "?" in path else "?"
    conn.request(method, f"{path}{sep}lang={lang}", body=data if data is not None else (b"" if method == "POST" else None),
                 headers=hdrs)
    r = conn.getresponse()
    payload = r.read()
    conn.close()
    if (r.getheader("Content-Type") or "").startswith("application/json"):
        return r.status, json.loads(payload)
    return r.status, payload


def learner(judge, ex_id):
    from practice._judge.exercises import BY_ID
    return judge.WORK / BY_ID[ex_id].filename


def nothing_ran(app, judge, tmp_path):
    """No judge action started, no learner file created, no progress recorded."""
    return app.actions == 0 and not (tmp_path / "progress.json").exists() and \
        not (judge.WORK.exists() and any(judge.WORK.iterdir()))


# ------------------------------------------------------------------------------------------ refusals

def test_the_server_listens_on_the_loopback_address_only(web):
    assert web.server.server_address[0] == "127.0.0.1"
    status, page = ask(web, "GET", "/")
    assert status == 200 and web.token.encode() in page and b"editor.js" in page


@pytest.mark.parametrize("token", [None, "", "wrong-token", "x" * 32])
def test_a_missing_or_wrong_token_is_refused_before_any_work(web, judge, tmp_path, token):
    for method, path in [("POST", "/api/exercise/204/run"), ("GET", "/api/exercise/204"), ("POST", "/api/exercise/204/reset"),
                         ("GET", "/api/list"), ("GET", "/")]:
        status, body = ask(web, method, path, token=token)
        assert status == 403, (method, path, status)
        assert isinstance(body, dict) and "token" in body["error"], body
    status, body = ask(web, "POST", "/api/exercise/204/save", {"text": "x = 1\n", "digest": ""}, token=token)
    assert status == 403
    assert nothing_ran(web, judge, tmp_path)


def test_the_token_in_the_address_is_accepted(web):
    status, page = ask(web, "GET", f"/app.js?token={web.token}", token=None)
    assert status == 200 and b"TBHEditor" in page


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1.evil.example:{port}",
                                  "127.0.0.1:1", "", "localhost.evil:{port}"])
def test_a_host_that_is_not_the_loopback_address_is_refused(web, judge, tmp_path, host):
    """DNS rebinding: a page of evil.example whose name now points at 127.0.0.1 sends Host: evil.example."""
    status, body = ask(web, "POST", "/api/exercise/204/run", headers={"Host": host.format(port=web.port)})
    assert status == 403 and "Host" in body["error"]
    status, body = ask(web, "GET", "/api/exercise/204", headers={"Host": host.format(port=web.port)})
    assert status == 403
    assert nothing_ran(web, judge, tmp_path)


@pytest.mark.parametrize("headers", [{"Origin": "http://evil.example"}, {"Origin": "null"},
                                     {"Origin": "http://127.0.0.1:1"}, {"Sec-Fetch-Site": "cross-site"},
                                     {"Sec-Fetch-Site": "same-site"}])
def test_a_cross_origin_request_is_refused(web, judge, tmp_path, headers):
    for method, path, body in [("POST", "/api/exercise/204/run", None), ("GET", "/api/exercise/204", None),
                               ("POST", "/api/exercise/204/save", {"text": "x = 1\n", "digest": ""})]:
        status, answer = ask(web, method, path, body, headers=headers)
        assert status == 403 and "another site" in answer["error"], answer
    assert nothing_ran(web, judge, tmp_path)


def test_the_page_own_origin_is_accepted(web):
    status, _ = ask(web, "GET", "/api/list", headers={"Origin": f"http://127.0.0.1:{web.port}",
                                                     "Sec-Fetch-Site": "same-origin"})
    assert status == 200


@pytest.mark.parametrize("path", ["/../judge.py", "/practice/judge.py", "/api/exercise/../../etc/passwd",
                                  "/api/exercise/999/run", "/api/exercise/204/../../../etc/passwd",
                                  "/api/exercise/%2e%2e/run", "/api/exercise/204/solution/x", "/editor-src/entry.js",
                                  "/api/exercise/204_rmsnorm.py", "//etc/passwd", "/api/exercise/204/delete"])
def test_a_path_outside_the_exercises_is_refused(web, judge, tmp_path, path):
    for method in ("GET", "POST"):
        status, body = ask(web, method, path)
        assert status == 404, (method, path, status)
        assert "not a page of the exercises" in body["error"]
    assert nothing_ran(web, judge, tmp_path)


def test_a_body_over_the_limit_is_refused_unread(web, judge, tmp_path):
    from practice._judge import web as webmod
    conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
    conn.putrequest("POST", "/api/exercise/204/save", skip_host=True)
    for k, v in {"Host": f"127.0.0.1:{web.port}", "X-Token": web.token, "Content-Type": "application/json",
                 "Content-Length": str(webmod.MAX_BODY + 1)}.items():
        conn.putheader(k, v)
    conn.endheaders()
    conn.send(b'{"text": "')                                      # the rest is never sent: the answer comes anyway
    r = conn.getresponse()
    assert r.status == 413 and "over 1024 KB" in json.loads(r.read())["error"]
    conn.close()
    status, body = ask(web, "POST", "/api/exercise/204/save", raw=b"x" * 10, headers={"Content-Type": "text/plain"})
    assert status == 415
    assert nothing_ran(web, judge, tmp_path)


# ------------------------------------------------------------------------------------------ the page's work

def test_the_list_is_the_terminal_list(web, judge, capsys):
    judge.main(["--json"])
    terminal = json.loads(capsys.readouterr().out)
    status, page = ask(web, "GET", "/api/list")
    assert status == 200 and page["total"] == terminal["total"] == len(page["exercises"])
    for mine, theirs in zip(page["exercises"], terminal["exercises"]):
        assert {k: mine[k] for k in theirs} == theirs
    assert page["exercises"][0]["label"] == "not started" and page["progress"] == f"0/{page['total']} passed"
    status, zh = ask(web, "GET", "/api/list", lang="zh")
    assert zh["exercises"][0]["label"] == "未开始" and zh["progress"].startswith("已通过")


def test_every_statement_has_both_languages():
    from practice._judge.exercises import EXERCISES
    from practice._judge.web import statement
    for ex in EXERCISES:
        s = statement(ex)
        assert s["en"][0].startswith(f"Exercise {ex.id}") and s["zh"][0].startswith(f"练习 {ex.id}"), ex.id
        assert len(s["en"]) >= 2 and len(s["zh"]) >= 2 and not any("练习 " in p for p in s["en"]), ex.id
    from practice._judge.web import unwrap                     # a narrow window wraps the text itself
    assert unwrap("one\ntwo,\n  x = 1\n  y = 2\nthree") == "one two,\n  x = 1\n  y = 2\nthree"     # a formula keeps its line
    assert unwrap("在 fp32 中\n计算，\nbf16 的 x") == "在 fp32 中计算，bf16 的 x"


def test_the_tolerances_are_read_from_the_cases(web):
    status, tol = ask(web, "GET", "/api/exercise/204/tolerance")
    whats = {(g["function"], g["what"]) for g in tol["tolerances"]}
    assert status == 200 and ("rms_norm", "float32: atol=1e-05, rtol=1e-05") in whats, whats
    assert any(f == "rms_norm" and "bfloat16 step" in w and "99%" in w for f, w in whats), whats
    assert sum(g["cases"] for g in tol["tolerances"]) >= 14
    status, zh = ask(web, "GET", "/api/exercise/201/tolerance", lang="zh")
    assert status == 200 and zh["tolerances"] and all("read_header" == g["function"] for g in zh["tolerances"])


def test_saves_are_atomic_and_a_file_changed_on_disk_is_never_overwritten_silently(web, judge):
    status, ex = ask(web, "GET", "/api/exercise/204")
    path = learner(judge, "204")
    assert status == 200 and path.read_text(encoding="utf-8") == ex["text"] and ex["statement"]["zh"]
    status, saved = ask(web, "POST", "/api/exercise/204/save", {"text": "# mine, 中文\n", "digest": ex["digest"]})
    assert status == 200 and path.read_text(encoding="utf-8") == "# mine, 中文\n"
    assert not list(path.parent.glob(".*.tmp"))                    # the temporary file was renamed over it
    path.write_text("# edited in my own editor\n", encoding="utf-8")
    status, refused = ask(web, "POST", "/api/exercise/204/save", {"text": "# from the page\n", "digest": saved["digest"]})
    assert status == 409 and "changed on disk" in refused["error"]
    assert path.read_text(encoding="utf-8") == "# edited in my own editor\n"
    status, disk = ask(web, "GET", "/api/exercise/204/disk")
    assert disk["digest"] != saved["digest"]
    status, kept = ask(web, "POST", "/api/exercise/204/keep", {"text": "# from the page\n"})
    backups = sorted((judge.WORK / ".backup").iterdir())
    assert status == 200 and [b.read_text(encoding="utf-8") for b in backups] == ["# from the page\n"]
    status, forced = ask(web, "POST", "/api/exercise/204/save", {"text": "# from the page\n", "digest": saved["digest"],
                                                                 "force": True})
    assert status == 200 and path.read_text(encoding="utf-8") == "# from the page\n"
    assert sorted(b.read_text(encoding="utf-8") for b in (judge.WORK / ".backup").iterdir()) == \
        ["# edited in my own editor\n", "# from the page\n"]


def test_run_hint_solution_reset_are_the_judges(web, judge, capsys):
    ask(web, "GET", "/api/exercise/204")
    path = learner(judge, "204")
    status, _ = ask(web, "POST", "/api/exercise/204/solution")
    assert status == 403 and "after you pass" in _["error"]
    path.write_text(NO_ONE_PLUS, encoding="utf-8")
    status, report = ask(web, "POST", "/api/exercise/204/run")
    assert status == 200 and report["status"] == "fail" and not report["passed"], report
    assert any("`1 +` is missing" in (c["mistake"] or "") for c in report["cases"]), report["cases"]
    failing = next(c for c in report["cases"] if not c["ok"])
    assert {"max_abs", "tolerance", "inputs"} <= set(failing["detail"])          # the numbers for the table
    assert report["lines"][0].startswith("✗ 204") and any("→" in line for line in report["lines"])
    status, zh = ask(web, "POST", "/api/exercise/204/run", lang="zh")
    assert "缺少" in " ".join(c["mistake"] or "" for c in zh["cases"]) or "1 +" in zh["lines"][0], zh["lines"][:3]
    assert "：" in zh["lines"][0]
    hints = [ask(web, "POST", "/api/exercise/204/hint")[1] for _ in range(2)]
    assert any(line.startswith("Hint") for line in hints[0]["lines"]), hints[0]
    assert [h["hints_seen"] for h in hints] == [1, 2] and any(line.startswith("Hint 2/3") for line in hints[1]["lines"])
    path.write_text((SOLUTIONS / "s204.py").read_text(encoding="utf-8"), encoding="utf-8")
    status, report = ask(web, "POST", "/api/exercise/204/run")
    assert report["status"] == "pass" and report["passed"] and "passed all" in report["lines"][0]
    judge.main(["--json"])
    row = next(r for r in json.loads(capsys.readouterr().out)["exercises"] if r["id"] == "204")
    assert row["passed"] and row["status"] == "pass"                                  # the terminal agrees
    status, sol = ask(web, "POST", "/api/exercise/204/solution")
    assert status == 200 and sol["text"].strip() == (SOLUTIONS / "s204.py").read_text(encoding="utf-8").strip()
    status, reset = ask(web, "POST", "/api/exercise/204/reset")
    backups = list((judge.WORK / ".backup").iterdir())
    assert status == 200 and reset["text"] == path.read_text(encoding="utf-8") and "NotImplementedError" in reset["text"]
    assert len(backups) == 1 and backups[0].read_text(encoding="utf-8") == (SOLUTIONS / "s204.py").read_text(encoding="utf-8")
    assert any("saved as" in line for line in reset["lines"])


def test_a_hanging_solution_gets_its_verdict_and_the_page_stays_responsive(web, judge, monkeypatch):
    """One grading at a time per exercise: a second Run of 204 is refused while the first hangs; the list
    still answers at once; the hanging one ends with the time limit's one line."""
    monkeypatch.setenv("QWEN_JUDGE_TIMEOUT", "3")
    ask(web, "GET", "/api/exercise/204")
    learner(judge, "204").write_text("import time\n\ndef rms_norm(x, weight, eps=1e-6):\n    time.sleep(600)\n\n"
                                     "def gated_rms_norm(x, gate, weight, eps=1e-6):\n    time.sleep(600)\n",
                                     encoding="utf-8")
    answers = {}
    first = threading.Thread(target=lambda: answers.update(first=ask(web, "POST", "/api/exercise/204/run")))
    start = time.monotonic()
    first.start()
    deadline = time.monotonic() + 10
    while not web.busy and time.monotonic() < deadline:
        time.sleep(0.02)
    assert web.busy == {"204"}
    status, second = ask(web, "POST", "/api/exercise/204/run")
    assert status == 409 and "being graded already" in second["error"]
    t0 = time.monotonic()
    status, _ = ask(web, "GET", "/api/list")
    assert status == 200 and time.monotonic() - t0 < 2
    first.join(30)
    status, report = answers["first"]
    assert status == 200 and report["status"] in ("fail", "error") and time.monotonic() - start < 25
    assert "did not finish within 3 s" in report["lines"][0], report["lines"]
    assert web.busy == set()


def test_a_memory_eating_solution_gets_its_verdict(web, judge, monkeypatch):
    """The sandbox's memory limit: the allocation fails inside it (nothing is allocated here)."""
    monkeypatch.setenv("QWEN_JUDGE_MEMORY", "0.5")
    ask(web, "GET", "/api/exercise/205")
    learner(judge, "205").write_text("import torch\n\ndef l2norm(x, eps=1e-6):\n"
                                     "    return torch.ones(2 * 2**30, dtype=torch.uint8)\n", encoding="utf-8")
    status, report = ask(web, "POST", "/api/exercise/205/run")
    assert status == 200 and report["status"] in ("fail", "error")
    assert "memory" in report["lines"][0] and "0.5 GB" in report["lines"][0], report["lines"]
    status, _ = ask(web, "GET", "/api/list")
    assert status == 200


def test_each_request_speaks_its_own_language():
    """qwen.lang.speaking: one thread's language leaves the others' (and the process's) alone."""
    from qwen.lang import T, get_lang, speaking
    seen = {}

    def other():
        with speaking("en"):
            time.sleep(0.05)
            seen["other"] = T("yes", "是")
    with speaking("zh"):
        thread = threading.Thread(target=other)
        thread.start()
        seen["here"] = T("yes", "是")
        thread.join()
    assert seen == {"here": "是", "other": "yes"} and get_lang() == "en"


def test_judge_web_refuses_other_commands_and_main_practice_starts_it(judge, capsys, monkeypatch):
    code = judge.main(["204", "--web"])
    assert code == 2 and "--web shows every exercise" in capsys.readouterr().err
    from practice._judge import web as webmod
    seen = {}
    monkeypatch.setattr(webmod, "serve", lambda j, args: seen.update(args=args) or 0)
    import main
    assert main.main(["practice", "--no-browser", "--tiny"]) == 0
    assert seen["args"].web and seen["args"].no_browser and seen["args"].tiny


@pytest.mark.parametrize("browser", [False, True])
def test_ctrl_c_stops_the_server_with_one_line_and_the_browser_opens_unless_told(judge, capsys, monkeypatch, browser):
    import webbrowser
    from practice._judge import web as webmod
    opened = []
    monkeypatch.setattr(webbrowser, "open", opened.append)

    def interrupted(self, poll_interval=0.5):
        time.sleep(0.3)                                              # the browser is opened from a thread
        raise KeyboardInterrupt
    monkeypatch.setattr(webmod.ThreadingHTTPServer, "serve_forever", interrupted)
    assert judge.main(["--web"] + ([] if browser else ["--no-browser"])) == 0
    out = capsys.readouterr()
    url = out.out.split()[5]
    assert url.startswith("http://127.0.0.1:") and "/?token=" in url and "Stopped." in out.err
    assert opened == ([url] if browser else [])


def test_a_file_that_cannot_be_created_is_one_line_on_the_page(web, judge):
    judge.WORK.write_text("a file where the folder should be\n", encoding="utf-8")
    status, body = ask(web, "GET", "/api/exercise/204")
    assert status == 409 and "cannot create" in body["error"] and "QWEN_PRACTICE_DIR" in body["error"], body
    status, body = ask(web, "POST", "/api/exercise/204/run")
    assert status == 409 and "cannot create" in body["error"] and web.busy == set()


def test_a_port_out_of_range_is_one_line(judge, capsys):
    assert judge.main(["--web", "--port", "70000"]) == 2
    assert "--port 70000" in capsys.readouterr().err


def test_tolerances_in_chinese_use_full_width_punctuation(web):
    status, zh = ask(web, "GET", "/api/exercise/204/tolerance", lang="zh")
    whats = [g["what"] for g in zh["tolerances"]]
    assert status == 200 and all("：" in w and ": " not in w and "; " not in w for w in whats), whats
    assert any("；99% 的数值逐位相同" in w for w in whats), whats


def test_the_server_never_writes_its_token_to_a_log(web, capfd):
    """The address with the token is printed once, by serve(); requests, refusals and malformed ones log nothing."""
    ask(web, "GET", f"/?token={web.token}", token=None)
    ask(web, "GET", "/api/nothing")
    ask(web, "GET", "/", token="wrong")
    conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
    conn.putrequest("GET", f"/?token={web.token}" + "x" * 70000, skip_host=True)   # a request line too long
    conn.endheaders()
    conn.getresponse().read()
    conn.close()
    out, err = capfd.readouterr()
    assert web.token not in out + err
