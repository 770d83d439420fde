"""`practice.check`: grade functions defined in notebook cells.

The functions travel to the sandbox as their source, with what they use from the notebook (helpers,
imports, constants, closed-over values: portable.py); the sandbox is the judge's own (sandbox.py), a
fresh process that never holds the kernel's memory. The expected values are computed in the kernel's
process and compared there. Progress is recorded as judge.py does.
"""
import html
import os
import sys
import time
import types

from practice._judge import grading, progress
from practice._judge.exercises import BY_ID
from practice._judge.report import report_lines
from qwen.lang import QwenError, T, set_lang


class Graded:
    """What check() returns: .status ("pass", "fail", "todo", "error"), .passed, .result (the plain dict)."""

    def __init__(self, ex, result, lines):
        self.exercise, self.result, self.lines = ex.id, result, lines
        self.status = result["status"]
        self.passed = self.status == "pass"
        self._cell = _cell_number()                    # the cell whose check() already showed the report

    def __repr__(self):
        return f"<check {self.exercise}: {self.status}>"

    def __str__(self):                                 # print(report): the report in words
        return "\n".join(self.lines)

    def _ipython_display_(self):
        """Evaluated in a later cell: the report again. As the last line of the cell that ran check(),
        nothing (check() has just shown it)."""
        if self._cell is None or _cell_number() != self._cell:
            _show(self.lines, self.status)


def _shell():
    """The IPython shell running this code, or None."""
    return sys.modules.get("IPython") and getattr(sys.modules["IPython"], "get_ipython", lambda: None)()


def _cell_number():
    """IPython's number of the cell running now, or None outside IPython."""
    return getattr(_shell(), "execution_count", None)


def _show(lines, status):
    if getattr(_shell(), "kernel", None) is not None:             # Jupyter, not a terminal IPython
        from IPython.display import HTML, display
        color = {"pass": "#1a7f37", "todo": "#6e7781"}.get(status, "#cf222e")
        head, rest = lines[0], lines[1:]
        body = f"<pre style='margin:0.2em 0 0 0'>{html.escape(chr(10).join(rest))}</pre>" if rest else ""
        display(HTML(f"<div class='qwen-judge' data-status='{status}'><b style='color:{color}'>{html.escape(head)}</b>{body}</div>"))
    else:
        print("\n".join(lines))


def _pick(ex, functions, named):
    """{name: function} for the exercise's functions, from positional (in order, or by __name__) and named."""
    if len(functions) > len(ex.functions):
        raise QwenError("exercise {id} takes {n} function(s) ({want}); you passed {k}", "练习 {id} 需要 {n} 个函数（{want}）；你传入了 {k} 个",
                        id=ex.id, n=len(ex.functions), want=", ".join(ex.functions), k=len(functions))
    found = {}
    by_name = {getattr(f, "__name__", None): f for f in functions}
    if all(n in by_name for n in ex.functions[:len(functions)]) and len(by_name) == len(functions):
        found.update({n: by_name[n] for n in ex.functions if n in by_name})
    else:
        found.update(zip(ex.functions, functions))
    found.update(named)
    for name, f in found.items():
        if name not in ex.functions:
            raise QwenError("exercise {id} has no function {n}; it asks for {want}", "练习 {id} 没有函数 {n}；它要的是 {want}",
                            id=ex.id, n=name, want=", ".join(ex.functions))
        if not callable(f):
            raise QwenError("{n} is not a function", "{n} 不是函数", n=name)
    missing = [n for n in ex.functions if n not in found]
    if missing:
        raise QwenError("check({id}, ...) needs {want}: missing {m}", "check({id}, ...) 需要 {want}：缺少 {m}",
                        id=ex.id, want=", ".join(ex.functions), m=", ".join(missing))
    return found


def check(exercise, *functions, model=None, tiny=None, lang=None, **named):
    if lang:
        set_lang(lang)
    from practice import judge
    ex = BY_ID.get(str(exercise))
    try:
        if ex is None:
            raise QwenError("there is no exercise {e}; the exercises are {ids}", "没有练习 {e}；现有的练习是 {ids}",
                            e=exercise, ids=", ".join(BY_ID))
        found = _pick(ex, functions, named)
        tiny = tiny if tiny is not None else os.environ.get("QWEN_TINY", "") not in ("", "0")
        args = types.SimpleNamespace(tiny=tiny, model=model)
        from engine.cli import _quiet_notebook_progress
        _quiet_notebook_progress()                     # the Hub client's tqdm warns on import in Jupyter
        result = grading.grade(ex, judge.model_for_checks(args), functions=found, time_limit=judge.time_limit(),
                               memory=judge.memory_limit())
    except (QwenError, grading.ModelProblem, judge.UsageError) as e:     # one line, no traceback
        _show([T("check: {e}", "check：{e}", e=e)], "error")
        return None
    lines = report_lines(ex, result, verbose=True)
    _show(lines, result["status"])                     # the report first, then the progress

    def change(p):
        entry = p.setdefault(ex.id, {})
        entry.update(status=result["status"], graded_at=time.strftime("%Y-%m-%d %H:%M:%S"))
        if result["status"] == "pass":
            entry["passed"] = True
    progress.update(change)
    return Graded(ex, result, lines)
