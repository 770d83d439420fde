"""The practice page: `python practice/judge.py --web` serves the exercises on 127.0.0.1.

PyTorch does not run in a browser, so the page is served by the judge on the learner's own machine
and every action is the judge's own: the list is cmd_list's rows, "Run" is judge.grade plus
judge.record (the same sandbox, limits and report as the terminal), "Hint", "Solution" and "Reset"
are cmd_hint, cmd_solution and cmd_reset. The files and the progress are the terminal's.

A page that runs code is guarded before any work is done: the server binds to the loopback address
only; every request carries the random token printed in the address; the Host header must be the
loopback address (a DNS-rebinding page would send its own name); a request from another origin
(Origin, Sec-Fetch-Site) is refused; the only paths are the page's four files and the exercises by
number (nothing on disk is named by the URL); a body over MAX_BODY is refused before it is read.
One judge action runs at a time (the judge keeps one model context), and a second on the same
exercise is refused while the first runs; the other requests (list, save, the page) stay answered.
"""
import ast
import contextlib
import hmac
import io
import json
import os
import re
import secrets
import signal
import sys
import tempfile
import threading
import time
import urllib.parse
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from practice._judge import jsontext, progress
from practice._judge.exercises import BY_ID, EXERCISES, text
from practice._judge.files import is_regular_or_absent, read_regular, write_atomic
from practice._judge.report import report_lines
from qwen.lang import LANGS, T, get_lang, speaking

PAGE = Path(__file__).resolve().parents[1] / "web"            # practice/web: the page and its editor
STATIC = {"/": ("index.html", "text/html"), "/app.js": ("app.js", "text/javascript"),
          "/style.css": ("style.css", "text/css"), "/editor.js": ("editor.js", "text/javascript")}
MAX_BODY = 1 << 20                                             # a solution is a few KB
HOST = "127.0.0.1"
HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
           "Referrer-Policy": "no-referrer",                  # the token is in the address
           "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'"}

# The page's own words, each once in both languages (the page fetches them: /api/ui).
UI = {
    "title": ("Transformer by Hand · practice", "手搓 Transformer · 练习"),
    "list": ("Exercises", "练习列表"),
    "progress": ("{d}/{n} passed", "已通过 {d}/{n}"),
    "next": ("Next: ", "下一个："),
    "all_passed": ("All passed. Open any to grade it again.", "全部通过。可以打开任意一个重新评测。"),
    "chapter": ("Chapter", "章"),
    "chapter_n": ("Chapter {n}", "第 {n} 章"),
    "passed_mark": ("Passed", "已通过"),
    "editor": ("Your solution, {f}", "你的解答，{f}"),
    "difficulty": ("Difficulty", "难度"),
    "status": ("Status", "状态"),
    "exercise": ("Exercise", "练习"),
    "tolerance": ("Checked to these tolerances", "检查的容差"),
    "n_cases": ("{n} case(s)", "{n} 个用例"),
    "run": ("Run", "运行"),
    "save": ("Save", "保存"),
    "hint": ("Hint", "提示"),
    "solution": ("Solution", "参考答案"),
    "reset": ("Reset", "恢复起始文件"),
    "back": ("← all exercises", "← 所有练习"),
    "saved": ("Saved {f}.", "已保存 {f}。"),
    "unsaved": ("unsaved changes", "有未保存的改动"),
    "running": ("Grading… (the sandbox's limits apply: {s:g} s)", "正在评测……（沙箱的限制照常适用：{s:g} 秒）"),
    "changed": ("{f} changed on disk since the page loaded it (edited in another editor?).",
                "页面载入之后，磁盘上的 {f} 被改动了（在别的编辑器里改过？）。"),
    "reload": ("Load the file from disk (your text here is kept as a backup)",
               "从磁盘重新载入文件（这里的文字会先备份）"),
    "overwrite": ("Keep my text (the file on disk is kept as a backup)", "保留我的文字（磁盘上的文件会先备份）"),
    "kept": ("Your text from the page is saved as {b}.", "页面里的文字已备份为 {b}。"),
    "confirm_reset": ("Restore the starter of {id}? Your version is kept as a backup.",
                      "把 {id} 恢复成起始文件？你的版本会先备份。"),
    "solution_locked": ("The solution is shown after you pass.", "通过之后才能看参考答案。"),
    "cases": ("Cases", "用例"),
    "case": ("Case", "用例"),
    "function": ("Function", "函数"),
    "result": ("Result", "结果"),
    "details": ("The first failure, in numbers", "第一个未通过的用例的数值"),
    "terminal": ("The report as the terminal prints it", "终端里打印的报告"),
    "d_inputs": ("input", "输入"),
    "d_expected": ("expected", "期望"),
    "d_got": ("got", "得到"),
    "d_max_abs": ("max |difference|", "最大绝对差"),
    "d_max_rel": ("max relative difference", "最大相对差"),
    "d_within": ("values within tolerance", "在容差内的数值"),
    "d_tolerance": ("tolerance", "容差"),
    "d_first_index": ("first mismatch at index", "第一个不一致的位置"),
    "d_expected_value": ("expected there", "那里的期望值"),
    "d_got_value": ("got there", "那里得到的值"),
    "named": ("Named mistake", "已知错误"),
    "busy": ("{id} is being graded already: wait for its report.", "{id} 正在评测：请等它的报告。"),
    "lost": ("The judge's server stopped (Ctrl-C?): start it again with python practice/judge.py --web.",
             "评测器的服务器停止了（按了 Ctrl-C？）：请用 python practice/judge.py --web 重新启动。"),
    "bad_reply": ("The judge's answer could not be read (HTTP status {s}): try Run again; if it recurs, run "
                  "python practice/judge.py in a terminal for the report.",
                  "无法读取评测器的回答（HTTP 状态 {s}）：请再点一次运行；如果还是这样，"
                  "请在终端里运行 python practice/judge.py 看报告。"),
    "leave": ("You have unsaved changes.", "你有未保存的改动。"),
    "lang": ("中文", "English"),
    "file": ("Your file", "你的文件"),
    "tiny": ("Graded on the built-in tiny checkpoint (made-up numbers); with the real model on disk the same checks "
             "use its tensors.", "用内置小检查点评测（数值是编造的）；磁盘上有真实模型时，同样的检查会使用它的张量。"),
}
LEVELS = {"easy": ("easy", "简单"), "medium": ("medium", "中等"), "hard": ("hard", "困难")}


class Refused(Exception):
    """A request answered with an error status and one line, before any work."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


# ------------------------------------------------------------------------------------------ the statement

def statement(ex):
    """{"en": [paragraphs], "zh": [paragraphs]}: the starter's docstring, which holds the statement in
    English, then in Chinese (from the line "练习 2xx"); the last line (the command) is left out."""
    doc = ast.get_docstring(ast.parse(ex.starter.read_text(encoding="utf-8"))) or ""
    en, _, zh = doc.partition("\n练习 ")
    parts = {"en": en, "zh": ("练习 " + zh) if zh else ""}
    return {lang: [unwrap(p.strip()) for p in part.split("\n\n") if p.strip() and not p.strip().startswith("Check: ")]
            for lang, part in parts.items()}


LIST_ITEM = re.compile(r"\s*(\d+\.|[-*•]|\(\w\))\s")        # "  1. Decay", "  - text tokens"
ALIGNED = re.compile(r"\S {2,}\S")                               # columns of a table or a formula's notes
FORMULA = re.compile(r"\s*\w+(\[[^\]]*\])? = ")                    # "  y = x / sqrt(...)", "  y[:, t] = ..."


def unwrap(paragraph):
    """The docstring's line breaks (wrapped at the file's width) removed, so a narrow window wraps the text
    itself, while what is laid out by line keeps its own line: a list item, a formula, the rows of a table,
    and the block after a line ending in a colon. A wrapped line's continuation, indented under the line it
    continues (a hanging indent, or inside an open parenthesis), joins it. Chinese joins without a space,
    except beside a Latin letter or digit ("在 fp32 中")."""
    lines = paragraph.split("\n")
    out, kept = lines[0], True                                     # kept: the last line was laid out by line
    for before, line in zip(lines, lines[1:]):
        kept = own_line(before, line, kept, out)
        if kept:
            out += "\n" + line
        else:
            out = out.rstrip() + joiner(out.rstrip()[-1:], line.lstrip()[:1]) + line.strip()
    return out


def joiner(a, b):
    """What goes between the last character of a line and the first of the next when they are joined:
    nothing between two Chinese characters or beside full-width punctuation, else a space."""
    def wide(c):
        return c > "\u2e7f"                                       # CJK and full-width punctuation
    if (wide(a) and wide(b)) or (wide(a) and not a.isalnum()) or (wide(b) and not b.isalnum()):
        return ""
    return " "


def own_line(before, line, kept, text):
    """Whether `line` starts a line of its own after `before` (else it continues `before`'s text);
    `kept`: whether `before` had a line of its own; `text`: the paragraph so far."""
    if not before.strip() or not line.strip():
        return True
    if before.count("(") + before.count("（") > before.count(")") + before.count("）"):
        return False                                               # inside an open parenthesis
    indent = len(line) - len(line.lstrip())
    was = len(before) - len(before.lstrip())
    if indent == 0:                                                # back at the margin, after an indented line:
        return was > 0 and (kept or text.rstrip().endswith((".", "。", ":", "：")))   # after a block or a sentence
    if LIST_ITEM.match(line) or ALIGNED.search(line.strip()) or ALIGNED.search(before.strip()):
        return True
    if indent > was and before.rstrip().endswith((":", "：")):
        return True                                                # the block a colon introduces
    if FORMULA.match(line) and (indent > was and before.rstrip().endswith((",", "，")) or indent == was and kept):
        return True                                                # "... to length 1,\n  y = x / sqrt(...)"
    return False


def _leaves(value):
    """The tensors and plain floats inside an expected value (dicts, lists, tuples, namespaces)."""
    if hasattr(value, "dtype") and hasattr(value, "shape"):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(v)
    elif hasattr(value, "__dict__") and not callable(value):
        yield from _leaves(vars(value))
    elif type(value) is float:
        yield value


def tolerances(ex, cases):
    """[{"function", "what", "cases"}]: how close each function's results must be, read from the cases
    themselves (their Tol, else the default for the result's dtype), so the page says what is checked."""
    from practice._judge.exercises import DEFAULT_TOL
    groups = {}
    for c in cases:
        whats = set()
        for leaf in _leaves(c.expected):
            if type(leaf) is float:
                whats.add(T("plain numbers: relative 1e-9", "普通数值：相对 1e-9"))
                continue
            name = str(leaf.dtype).replace("torch.", "")
            tol = c.tol or DEFAULT_TOL.get(name)
            whats.add(name + T(": ", "：") + (tol.text(name) if tol else T("exactly equal", "完全相等")))
        if c.check is not None:
            whats = {T("the case's own rule (see the statement)", "用例自己的规则（见题目）")}
        elif not whats:
            whats = {T("exactly equal", "完全相等")}
        for what in sorted(whats):
            key = (c.function, what)
            groups[key] = groups.get(key, 0) + 1
    return [{"function": f, "what": w, "cases": n} for (f, w), n in groups.items()]


# ------------------------------------------------------------------------------------------ files

def keep_copy(judge, ex, data, kind):
    """A copy of some text of the learner's in .backup/ (as --reset keeps one); returns its path."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    stem = Path(ex.filename).stem
    backup, n = judge.WORK / ".backup" / f"{stem}.{kind}-{stamp}.py", 1
    backup.parent.mkdir(parents=True, exist_ok=True)
    while True:
        try:
            with open(backup, "xb") as f:                          # never over another backup
                f.write(data)
            return backup
        except FileExistsError:
            backup, n = backup.with_name(f"{stem}.{kind}-{stamp}-{n}.py"), n + 1


# ------------------------------------------------------------------------------------------ the app

class App:
    """What the page can ask for; each method returns a JSON-able dict (or raises Refused)."""

    def __init__(self, judge, args):
        self.judge = judge                                         # the practice.judge module that started us
        self.args = args
        self.token = secrets.token_urlsafe(24)
        self.port = None
        self.model = None
        self.action = threading.Lock()                             # one judge action at a time
        self.busy = set()                                          # exercises being graded
        self.busy_lock = threading.Lock()
        self.writing = threading.Lock()                            # a save's check and write, a reset's backup and copy
        self.tolerance_cache = {}
        self.actions = 0                                           # judge actions started (the tests read it)

    # -- reading
    def ui(self):
        return {k: {"en": en, "zh": zh} for k, (en, zh) in UI.items()}

    def listing(self):
        state = progress.load()
        rows = self.judge.list_rows(state)
        for r in rows:
            ex = BY_ID[r["id"]]
            r["label"] = self.judge.status_label(r, state)
            r["chapter"] = str(ex.taught_in)
            r["level"] = text(LEVELS.get(ex.difficulty, ex.difficulty))
        done = sum(r["passed"] for r in rows)
        nxt = self.judge.next_unsolved(state)
        return {"exercises": rows, "passed": done, "total": len(rows), "next": nxt.id if nxt else None,
                "progress": T(*UI["progress"], d=done, n=len(rows))}

    def exercise(self, ex):
        path = self.judge.learner_file(ex, quiet=True)            # created from the starter, as `judge.py 204` does
        entry = progress.load().get(ex.id, {})
        source = self._text(path)
        return {"id": ex.id, "title": {"en": ex.title[0], "zh": ex.title[1]}, "statement": statement(ex),
                "file": self.judge.shown(path), "text": source, "digest": self.judge.digest(path),
                "passed": bool(entry.get("passed")), "status": entry.get("status", "new"),
                "hints_seen": entry.get("hints", 0), "hints": len(ex.hints), "functions": list(ex.functions),
                "level": dict(zip(("en", "zh"), LEVELS.get(ex.difficulty, (ex.difficulty,) * 2))),
                "chapter": str(ex.taught_in), "start_line": start_line(ex, source),
                "time_limit": self.judge.time_limit()}

    def tolerance(self, ex):
        """The tolerances of the cases, built as a grading builds them (the same model context: one at a time)."""
        cached = self.tolerance_cache.get((ex.id, get_lang()))
        if cached is None:
            with self.action:
                with tempfile.TemporaryDirectory() as scratch:
                    try:
                        ctx = self.judge.grading.context(self._model(), scratch)
                    except self.judge.grading.ModelProblem as e:
                        raise Refused(HTTPStatus.INTERNAL_SERVER_ERROR, str(e)) from None
                    cached = tolerances(ex, ex.cases(ctx))
            self.tolerance_cache[(ex.id, get_lang())] = cached
        return {"tolerances": cached}

    def disk(self, ex):
        return {"digest": self.judge.digest(self.judge.WORK / ex.filename)}

    def _text(self, path):
        try:
            return read_regular(path).decode("utf-8")
        except UnicodeDecodeError:
            raise Refused(HTTPStatus.CONFLICT, T("{f} is not UTF-8 text: open it in your own editor and save it as UTF-8",
                                                 "{f} 不是 UTF-8 文本：请在你自己的编辑器里打开它，另存为 UTF-8",
                                                 f=self.judge.shown(path))) from None
        except OSError as e:
            raise Refused(HTTPStatus.CONFLICT, T("cannot read {f} ({e})", "无法读取 {f}（{e}）",
                                                 f=self.judge.shown(path), e=e.strerror or e)) from None

    # -- writing
    def save(self, ex, body):
        """Atomic; refused (409, nothing written) when the file on disk is not the one the page loaded,
        unless `force`, and then the disk's version is kept in .backup/ first."""
        new = _field(body, "text", str).encode("utf-8")
        base = _field(body, "digest", str)
        path = self.judge.WORK / ex.filename
        with self.writing:                                         # two tabs saving at once: the second sees the first
            return self._save(ex, path, new, base, body.get("force"))

    def _save(self, ex, path, new, base, force):
        self.judge.refuse_link(path, T("the page", "页面"))
        if not is_regular_or_absent(path):
            raise Refused(HTTPStatus.CONFLICT, T("{f} is not a regular file: not written", "{f} 不是普通文件：没有写入",
                                                 f=self.judge.shown(path)))
        now = self.judge.digest(path)
        kept = None
        if now != base:
            if not force:
                raise Refused(HTTPStatus.CONFLICT, T(*UI["changed"], f=self.judge.shown(path)))
            if path.exists():
                kept = keep_copy(self.judge, ex, read_regular(path), "disk")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, new)
        out = {"digest": self.judge.digest(path), "message": T(*UI["saved"], f=self.judge.shown(path))}
        if kept:
            out["message"] += " " + T("The version that was on disk is kept as {b}.", "磁盘上原来的版本已备份为 {b}。",
                                      b=self.judge.shown(kept))
        return out

    def keep(self, ex, body):
        """The page's unsaved text, kept in .backup/ before the page loads the file from disk over it."""
        backup = keep_copy(self.judge, ex, _field(body, "text", str).encode("utf-8"), "page")
        return {"backup": self.judge.shown(backup), "message": T(*UI["kept"], b=self.judge.shown(backup))}

    # -- the judge's actions
    @contextlib.contextmanager
    def _acting(self, ex):
        with self.busy_lock:
            if ex.id in self.busy:
                raise Refused(HTTPStatus.CONFLICT, T(*UI["busy"], id=ex.id))
            self.busy.add(ex.id)
        try:
            with self.action:
                self.actions += 1
                yield
        finally:
            with self.busy_lock:
                self.busy.discard(ex.id)

    def _printed(self, fn, *a):
        """(exit code, lines) of one of the judge's commands; its usage errors are lines too."""
        out = io.StringIO()
        with contextlib.redirect_stdout(out):                       # only judge actions print, one at a time
            try:
                code = fn(*a)
            except self.judge.UsageError as e:
                print(str(e))
                code = 2
        return code, out.getvalue().splitlines()

    def _model(self):
        if self.model is None:
            self.model = self.judge.model_for_checks(self.args)
        return self.model

    def run(self, ex):
        with self._acting(ex):
            file = self.judge.learner_file(ex, quiet=True)
            try:
                model = self._model()
                graded = self.judge.digest(file)                   # a save while it runs is "edited" after
                result = self.judge.grade(ex, file, model)
            except self.judge.grading.ModelProblem as e:
                raise Refused(HTTPStatus.INTERNAL_SERVER_ERROR, str(e)) from None
            progress.update(self.judge.record(ex, result, file, graded))    # as cmd_grade: the same record
        cases = [{"function": c["function"], "name": c["name"], "ok": c["ok"], "todo": c["todo"],
                  "message": c["message"], "mistake": (c.get("diagnosis") or {}).get("says"),
                  "detail": c.get("detail") or {}} for c in result["cases"]]
        return {"status": result["status"], "error": result["error"], "lines": report_lines(ex, result, True),
                "cases": cases, "digest": self.judge.digest(file), "tiny": "tiny" in str(model) and ex.uses_model,
                "passed": bool(progress.load().get(ex.id, {}).get("passed"))}

    def hint(self, ex):
        with self._acting(ex):
            self._model()
            code, lines = self._printed(self.judge.cmd_hint, ex, self._args())
        return {"lines": lines, "hints_seen": progress.load().get(ex.id, {}).get("hints", 0)}

    def solution(self, ex):
        with self._acting(ex):
            code, lines = self._printed(self.judge.cmd_solution, ex)
        if code:
            raise Refused(HTTPStatus.FORBIDDEN, "\n".join(lines))
        return {"text": "\n".join(lines)}

    def reset(self, ex):
        path = self.judge.WORK / ex.filename
        with self._acting(ex), self.writing:                       # no save between the backup and the starter
            code, lines = self._printed(self.judge.cmd_reset, ex)
        if not os.path.lexists(path):                              # deleted on disk: the page keeps its own text
            raise Refused(HTTPStatus.CONFLICT, "\n".join(lines))
        text_now = self._text(path)
        return {"lines": lines, "text": text_now, "digest": self.judge.digest(path), "ok": code == 0,
                "start_line": start_line(ex, text_now)}

    def _args(self):
        import argparse
        return argparse.Namespace(**{**vars(self.args), "file": None})


def start_line(ex, source):
    """The line (from 1) where the editor opens: the first statement of the first function to fill in,
    below the statement's docstring; the line after its `def` when the file does not parse; else 1."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        for n, line in enumerate(source.splitlines(), 1):
            if re.match(r"\s*def\s+(%s)\b" % "|".join(map(re.escape, ex.functions)), line):
                return n + 1
        return 1
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in ex.functions:
            body = node.body[1:] if ast.get_docstring(node) is not None and len(node.body) > 1 else node.body
            return body[0].lineno                                  # past the function's own docstring
    return 1


def _field(body, name, kind):
    value = body.get(name) if isinstance(body, dict) else None
    if type(value) is not kind:
        raise Refused(HTTPStatus.BAD_REQUEST, T("the request has no {n}", "请求里没有 {n}", n=name))
    if kind is str:
        try:
            value.encode("utf-8")                                  # JSON's "\ud800": no file can hold it
        except UnicodeEncodeError:
            raise Refused(HTTPStatus.BAD_REQUEST, T("refused: the request's {n} is not text (a lone surrogate)",
                                                    "已拒绝：请求里的 {n} 不是文本（有落单的代理字符）", n=name)) from None
    return value


# ------------------------------------------------------------------------------------------ HTTP

ROUTES = {("GET", None): "exercise", ("GET", "disk"): "disk", ("GET", "tolerance"): "tolerance",
          ("POST", "save"): "save", ("POST", "keep"): "keep",
          ("POST", "run"): "run", ("POST", "hint"): "hint", ("POST", "solution"): "solution",
          ("POST", "reset"): "reset"}


class Handler(BaseHTTPRequestHandler):
    app = None                                                     # set on the server's own subclass
    protocol_version = "HTTP/1.1"
    timeout = 60                                                   # a client that stops sending mid-request
    server_version = "practice"
    sys_version = ""

    def log_message(self, *a):                                     # the terminal stays quiet
        pass

    def handle(self):
        """A page that goes away before its answer (a reload during Run) ends only its own connection."""
        try:
            super().handle()
        except ConnectionError:
            self.close_connection = True

    def do_GET(self):
        self._answer("GET")

    def do_POST(self):
        self._answer("POST")

    def do_PUT(self):
        self._answer("PUT")

    do_DELETE = do_PATCH = do_OPTIONS = do_PUT

    def _answer(self, method):
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        lang = (query.get("lang") or [None])[0]
        kind = None
        with speaking(lang if lang in LANGS else get_lang()):
            self.body_read = False
            try:
                self._guard(query)
                status, body, kind = self._route(method, url.path)
                if not self.body_read and (self.headers.get("Content-Length") not in (None, "0")
                                           or self.headers.get("Transfer-Encoding")):
                    self.close_connection = True                   # an unread body never reads as a request
            except Refused as e:
                self.close_connection = True                       # an unread body never reads as a request
                status, body = e.status, {"error": str(e)}
            except self.app.judge.UsageError as e:                 # e.g. the learner's file cannot be created
                status, body = HTTPStatus.CONFLICT, {"error": str(e)}
            except Exception as e:                                 # noqa: BLE001 - one line to the page, never a crash
                if getattr(self.app.args, "debug", False):
                    raise
                status, body = HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(e).__name__}: {e}"}
        self._send(status, body, kind)

    def _guard(self, query):
        """Every refusal that comes before any work, in this order."""
        here = (f"127.0.0.1:{self.app.port}", f"localhost:{self.app.port}")
        if self.headers.get("Host", "") not in here:
            raise Refused(HTTPStatus.FORBIDDEN, T("refused: the Host header is not this computer's loopback address",
                                                  "已拒绝：Host 头不是本机的回环地址"))
        given = self.headers.get("X-Token") or (query.get("token") or [""])[0]
        if not hmac.compare_digest(given.encode("utf-8", "replace"), self.app.token.encode()):
            raise Refused(HTTPStatus.FORBIDDEN, T("refused: the token is missing or wrong; open the address the judge printed",
                                                  "已拒绝：缺少口令或口令不对；请打开评测器打印的地址"))
        origin, site = self.headers.get("Origin"), self.headers.get("Sec-Fetch-Site")
        other = origin if origin is not None and origin not in ["http://" + h for h in here] else \
            site if site is not None and site not in ("same-origin", "none") else None
        if other is not None:
            raise Refused(HTTPStatus.FORBIDDEN, T("refused: a request from another site ({o})", "已拒绝：来自别的网站的请求（{o}）",
                                                  o=other[:80]))

    def _route(self, method, path):
        if method == "GET" and path in STATIC:
            name, kind = STATIC[path]
            data = (PAGE / name).read_bytes()
            return HTTPStatus.OK, data.replace(b"__TOKEN__", self.app.token.encode()) if name == "index.html" else data, kind
        if method == "GET" and path in ("/api/ui", "/api/list"):
            return HTTPStatus.OK, self.app.ui() if path == "/api/ui" else self.app.listing(), None
        parts = path.split("/")
        if len(parts) in (4, 5) and parts[:3] == ["", "api", "exercise"] and parts[3] in BY_ID:
            action = ROUTES.get((method, parts[4] if len(parts) == 5 else None))
            if action:
                ex, body = BY_ID[parts[3]], self._body() if method == "POST" else None   # every POST is JSON
                answer = getattr(self.app, action)
                return HTTPStatus.OK, answer(ex, body) if action in ("save", "keep") else answer(ex), None
        if method not in ("GET", "POST"):
            raise Refused(HTTPStatus.METHOD_NOT_ALLOWED, T("refused: {m} is not used here", "已拒绝：这里不用 {m}", m=method))
        raise Refused(HTTPStatus.NOT_FOUND, T("refused: {p} is not a page of the exercises", "已拒绝：{p} 不是练习的页面",
                                              p=path[:80]))

    def _body(self):
        """The JSON body, refused when over MAX_BODY (before reading it) or not JSON."""
        raw = self.headers.get("Content-Length")
        if raw is None or not (raw.isascii() and raw.isdigit()) or self.headers.get("Transfer-Encoding"):
            raise Refused(HTTPStatus.LENGTH_REQUIRED, T("refused: the request has no Content-Length", "已拒绝：请求没有 Content-Length"))
        size = int(raw)
        not_json = Refused(HTTPStatus.BAD_REQUEST, T("refused: the request is not JSON", "已拒绝：请求不是 JSON"))
        if size > MAX_BODY:                                        # the body is never read
            raise Refused(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, T("refused: the request is over {k} KB",
                                                                 "已拒绝：请求超过 {k} KB", k=MAX_BODY >> 10))
        if (self.headers.get("Content-Type") or "").split(";")[0].strip() != "application/json":
            raise Refused(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, str(not_json))
        data = self.rfile.read(size) if size else b"{}"
        self.body_read = True
        if size and len(data) != size:
            raise Refused(HTTPStatus.BAD_REQUEST, T("refused: the request ended before its Content-Length",
                                                    "已拒绝：请求在 Content-Length 说的长度之前就结束了"))
        try:
            body = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):   # RecursionError: [[[[… nested past Python's limit
            raise not_json from None
        if not isinstance(body, dict):
            raise not_json
        return body

    def _send(self, status, body, kind):
        data = body if isinstance(body, bytes) else jsontext.dumps(body, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", f"{kind or 'application/json'}; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for k, v in HEADERS.items():
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)


def make_server(judge, args, port=0):
    """The server and its app, bound to 127.0.0.1 (port 0: one the system chooses); not yet serving."""
    app = App(judge, args)
    handler = type("PracticeHandler", (Handler,), {"app": app})
    server = ThreadingHTTPServer((HOST, port), handler)
    server.daemon_threads = True
    app.port = server.server_address[1]
    return server, app


def address(app):
    return f"http://127.0.0.1:{app.port}/?token={app.token}"


def serve(judge, args):
    """Serve until Ctrl-C; opens the browser unless --no-browser."""
    try:
        server, app = make_server(judge, args, args.port)
    except OSError as e:
        raise judge.UsageError(T("cannot listen on 127.0.0.1:{p} ({e}): choose another --port",
                                 "无法监听 127.0.0.1:{p}（{e}）：请换一个 --port", p=args.port, e=e.strerror or e)) from None
    from practice._judge import sandbox
    sandbox.prestart()                                             # its interpreter starts while the page loads
    if hasattr(signal, "SIGPIPE"):                                 # engine.cli set SIG_DFL for `| head`: here a closed
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)              # connection would kill the server without a word
    url = address(app)
    print(T("The practice page is at {u}\n(only this computer can open it; Ctrl-C stops the server)",
            "练习页面的地址是 {u}\n（只有这台电脑能打开它；按 Ctrl-C 停止服务器）", u=url), flush=True)
    if not args.no_browser:
        import webbrowser
        threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()
    try:
        server.serve_forever(poll_interval=0.25)
    except KeyboardInterrupt:
        print(T("\nStopped.", "\n已停止。"), file=sys.stderr)
    finally:
        server.server_close()
    return 0


__all__ = ["App", "EXERCISES", "make_server", "serve", "statement"]
