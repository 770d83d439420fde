"""The practice page in a real browser: Debian's Chromium driven by Playwright for Python.

One browser launch for the whole scenario of issue 21: open the list; open 204, type a wrong
solution (no `1 +`), run it, see the named mistake; fix it, run it, see it pass; the list shows it
passed and the terminal judge agrees; switch to 中文; a file changed on disk is offered for reload
and the page's text is kept; take a hint, reset, find the backup; the list fits a narrow window.
Screenshots of the list and of the failing report go to $TBH_ARTEFACTS (else the test's temp
folder), never into the repository. Skipped, with the reason, where Playwright or Chromium is absent.

Then a wrong 232, whose report holds -inf, gets its verdict, and a reply that is not JSON, an error page or
no answer is an error line, never an endless "Grading"; and axe-core finds no violation on the list, an
exercise and its failing report, in both languages (skipped, saying why, where axe-core is not fetched).
"""
import contextlib
import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import ROOT
from test_web import NO_ONE_PLUS, REFERENCE, learner, web  # noqa: F401 - `web` is the served page's fixture
from test_web_page import RETURNS_LOGITS

pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed (pip install playwright)")


def chromium():
    """The system's Chromium (Playwright's own browser downloads are not used)."""
    for name in (os.environ.get("TBH_CHROMIUM"), "chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = name and shutil.which(name)
        if found:
            return found
    return None


BROWSER = chromium()
WIDER = """() => [document.documentElement.scrollWidth, ...[...document.querySelectorAll("body *")]
                .filter((e) => e.getBoundingClientRect().left + window.scrollX + e.scrollWidth > 381)
                .slice(0, 8).map((e) => e.tagName + "#" + e.id + "." + e.className)]"""
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no Chromium on this machine (apt-get install chromium)")


# axe-core, the accessibility checker, from the npm registry (.ci/run fetches it: npm pack axe-core@4.14 into
# out/axe-core); never copied into the repository.
AXE = Path(os.environ.get("TBH_AXE") or ROOT / "out" / "axe-core" / "package" / "axe.min.js")


@contextlib.contextmanager
def browsing(web, hash=""):  # noqa: F811 - the fixture's object
    """A page of the served app in Chromium; yields (page, errors the page threw)."""
    from playwright.sync_api import expect, sync_playwright
    errors = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=BROWSER,
                                     args=["--no-sandbox"] if hasattr(os, "geteuid") and os.geteuid() == 0 else [])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900}, locale="en-US")
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.set_default_timeout(30_000)
            expect.set_options(timeout=30_000)
            page.goto(f"http://127.0.0.1:{web.port}/?token={web.token}{hash}")
            yield page, errors
        finally:
            browser.close()


def axe_violations(page):
    """axe-core's violations on the page as it is now: [(rule, impact, [elements])]."""
    if not hasattr(axe_violations, "source"):
        axe_violations.source = AXE.read_text(encoding="utf-8")
    page.evaluate(axe_violations.source)                             # evaluated, not a <script>: the page's CSP holds
    return page.evaluate("""async () => (await axe.run(document)).violations
                            .map((v) => [v.id, v.impact, v.nodes.map((n) => n.target.join(" "))])""")


def fits(page):
    """Nothing wider than the 380-pixel window (after the page has laid itself out again)."""
    try:
        page.wait_for_function("document.documentElement.scrollWidth <= 381", timeout=5000)
    except Exception:                                               # noqa: BLE001 - say which elements stick out
        raise AssertionError(page.evaluate(WIDER)) from None


def test_the_scenario_in_a_real_browser(web, judge, capsys, tmp_path):  # noqa: F811 - the fixture
    from playwright.sync_api import expect, sync_playwright
    from practice._judge.exercises import EXERCISES            # another exercise may be added: counted, not written
    artefacts = Path(os.environ.get("TBH_ARTEFACTS") or tmp_path / "artefacts")
    artefacts.mkdir(parents=True, exist_ok=True)
    url = f"http://127.0.0.1:{web.port}/?token={web.token}"
    errors = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=BROWSER,
                                     args=["--no-sandbox"] if hasattr(os, "geteuid") and os.geteuid() == 0 else [])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900}, locale="en-US")
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("dialog", lambda d: d.accept())                     # Reset asks first
            page.set_default_timeout(30_000)                            # actions; and expect()'s own 5 s default
            expect.set_options(timeout=30_000)                          # failed at load 10: a grading took longer

            # 1. The list.
            page.goto(url)
            expect(page.locator("#row-204")).to_contain_text("not started")
            expect(page.locator("#progress")).to_have_text(f"0/{len(EXERCISES)} passed")
            expect(page.locator("#next")).to_contain_text("Next: 201")
            page.screenshot(path=str(artefacts / "list.png"), full_page=True)

            # 2. 204 with a wrong solution, typed into the editor and saved with Ctrl-S: the named mistake.
            page.click("#row-204 a >> nth=1")
            expect(page.locator("#tolerances")).to_contain_text("atol=1e-05")
            page.click(".cm-content")
            page.keyboard.press("Control+End")
            page.keyboard.type("\nif x:")
            page.keyboard.press("Enter")                                # Python indentation: 4 spaces after a colon
            page.keyboard.type("y = 1")
            page.keyboard.press("Enter")
            page.keyboard.press("Tab")                                  # Tab indents (focus stays in the editor)
            page.keyboard.type("z")
            lines = page.locator(".cm-content .cm-line").all_inner_texts()
            assert lines[-3:] == ["if x:", "    y = 1", "        z"], lines[-3:]
            page.keyboard.press("Control+a")
            page.keyboard.insert_text(NO_ONE_PLUS)
            expect(page.locator("#state")).to_have_text("unsaved changes")
            page.keyboard.press("Control+s")
            expect(page.locator("#state")).to_contain_text("Saved")
            assert learner(judge, "204").read_text(encoding="utf-8") == NO_ONE_PLUS
            page.click("#run")
            expect(page.locator("#verdict")).to_contain_text("✗ 204")
            expect(page.locator("#cases .mistake").first).to_contain_text("the `1 +` is missing")
            expect(page.locator("#details")).to_contain_text("max |difference|")
            expect(page.locator("#solution")).to_be_disabled()
            page.screenshot(path=str(artefacts / "failing-report.png"), full_page=True)

            # 3. Fixed (Run saves first): it passes.
            page.click(".cm-content")
            page.keyboard.press("Control+a")
            page.keyboard.insert_text(REFERENCE)
            page.click("#run")
            expect(page.locator("#verdict")).to_contain_text("passed all")
            expect(page.locator("#solution")).to_be_enabled()
            page.click("#solution")
            expect(page.locator("#solution-text")).to_contain_text("Reference solution for 204")

            # 4. The list shows it passed, and the terminal judge agrees.
            page.click("#home")
            expect(page.locator("#row-204")).to_have_attribute("data-passed", "true")
            expect(page.locator("#row-204")).to_contain_text("passed")
            expect(page.locator("#progress")).to_have_text(f"1/{len(EXERCISES)} passed")
            judge.main(["--json"])
            row = next(r for r in json.loads(capsys.readouterr().out)["exercises"] if r["id"] == "204")
            assert row["passed"] and row["status"] == "pass"

            # 5. 中文.
            page.click("#lang")
            expect(page.locator("#home")).to_have_text("手搓 Transformer · 练习")
            expect(page.locator("#row-204")).to_contain_text("已通过")
            page.click("#row-204 a >> nth=1")
            expect(page.locator("#run")).to_have_text("运行")
            expect(page.locator("#statement h1")).to_contain_text("零中心的 RMSNorm")
            expect(page.locator("#tolerances")).to_contain_text("个用例")
            page.screenshot(path=str(artefacts / "exercise-zh.png"))

            # The file changed on disk while the page has unsaved text: it says so, and keeps that text.
            page.click(".cm-content")
            page.keyboard.insert_text("# typed in the page\n")
            learner(judge, "204").write_text(REFERENCE + "# saved by my own editor\n", encoding="utf-8")
            expect(page.locator("#banner")).to_contain_text("被改动了")
            page.click("#reload")
            expect(page.locator(".cm-content")).to_contain_text("# saved by my own editor")
            kept = [p.read_text(encoding="utf-8") for p in (judge.WORK / ".backup").iterdir()]
            assert any("# typed in the page\n" in k for k in kept), kept

            # 6. A hint, then reset: the backup holds the learner's version.
            page.click("#hint")
            expect(page.locator("#hint-text")).to_contain_text("提示 1/")
            page.click("#reset")
            expect(page.locator("#reset-text")).to_contain_text("已备份为")
            expect(page.locator(".cm-content")).to_contain_text("NotImplementedError")
            backups = [p.read_text(encoding="utf-8") for p in (judge.WORK / ".backup").iterdir()]
            assert REFERENCE + "# saved by my own editor\n" in backups

            # A narrow window: the list and the exercise fit its width.
            page.set_viewport_size({"width": 380, "height": 800})
            fits(page)
            page.click("#home")
            expect(page.locator("#row-204")).to_be_visible()
            fits(page)
        finally:
            browser.close()
    assert not errors, errors
    print(f"screenshots: {artefacts}")


def test_a_failing_232_gets_its_verdict_and_a_failed_request_is_one_line(web, judge):  # noqa: F811 - the fixture
    """A wrong 232 holds -inf in its report: the reply must parse and the verdict appear, never an endless
    "Grading"; an answer that is not JSON, an error page or no answer at all is an error line."""
    from playwright.sync_api import expect
    with browsing(web, "#/232") as (page, errors):
        expect(page.locator("#where")).to_have_text("Chapter 9 · easy")
        # The editor opens on the function's body (below the 40-line statement), the cursor there, visible.
        expect(page.locator(".cm-activeLine")).to_have_text("    raise NotImplementedError")
        assert page.evaluate("document.activeElement.classList.contains('cm-content')")
        top, bottom, view_top, view_bottom = page.evaluate("""() => {
            const a = document.querySelector(".cm-activeLine").getBoundingClientRect();
            const s = document.querySelector(".cm-scroller").getBoundingClientRect();
            return [a.top, a.bottom, s.top, s.bottom]; }""")
        assert view_top <= top and bottom <= view_bottom, (top, bottom, view_top, view_bottom)

        page.keyboard.press("Control+a")
        page.keyboard.insert_text(RETURNS_LOGITS)
        page.click("#run")
        expect(page.locator("#verdict")).to_contain_text("✗ 232")
        expect(page.locator("#details")).to_contain_text("-inf")
        assert learner(judge, "232").read_text(encoding="utf-8") == RETURNS_LOGITS

        page.click("#lang")                                            # the header follows the language
        expect(page.locator("#where")).to_have_text("第 9 章 · 简单")
        page.click("#lang")

        for answer in (lambda route: route.fulfill(status=200, content_type="application/json", body='{"a": -Infinity}'),
                       lambda route: route.fulfill(status=200, content_type="application/json", body='{"status": "fail"}'),
                       lambda route: route.fulfill(status=502, content_type="text/html", body="<h1>Bad gateway</h1>"),
                       lambda route: route.abort()):
            page.route("**/api/exercise/232/run*", answer)
            page.click("#run")
            expect(page.locator("#run-error")).to_be_visible()
            expect(page.locator("#report")).not_to_contain_text("Grading")
            expect(page.locator("#run")).to_be_enabled()
            page.unroute("**/api/exercise/232/run*")
    assert not errors, errors


@pytest.mark.skipif(not AXE.is_file(), reason=f"axe-core is not at {AXE} (.ci/run fetches it: npm pack axe-core@4.14)")
def test_axe_finds_nothing_on_the_list_an_exercise_and_its_report(web, judge):  # noqa: F811 - the fixture
    from playwright.sync_api import expect
    with browsing(web) as (page, errors):
        expect(page.locator("#row-232")).to_be_visible()
        assert axe_violations(page) == []
        page.click("#row-232 a >> nth=1")
        expect(page.locator(".cm-activeLine")).to_be_visible()
        assert axe_violations(page) == []
        page.keyboard.press("Control+a")
        page.keyboard.insert_text(RETURNS_LOGITS)
        page.click("#run")
        expect(page.locator("#details")).to_be_visible()
        assert axe_violations(page) == []
        page.click("#lang")
        expect(page.locator("#where")).to_contain_text("第 9 章")
        assert axe_violations(page) == []
    assert not errors, errors
