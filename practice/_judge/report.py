"""The grading report in words: one line per verdict, one per failing case, numbers for the first."""
from practice._judge.exercises import text
from qwen.lang import T


def first_failing(result):
    """The first case that failed (not merely unfinished), else the first unfinished one."""
    return next((c for c in result["cases"] if not c["ok"] and not c["todo"]), None) or \
        next((c for c in result["cases"] if not c["ok"]), None)


def summary_line(result):
    """One line: the verdict, or the first problem."""
    if result["status"] == "pass":
        return T("passed all {n} cases", "全部 {n} 个用例通过", n=len(result["cases"]))
    if result["error"]:
        return result["error"]["message"]
    bad = [c for c in result["cases"] if not c["ok"]]
    todo = sum(c["todo"] for c in bad)
    if todo == len(bad):
        return T("not finished: {n} case(s) still raise NotImplementedError", "还没完成：{n} 个用例仍然抛出 NotImplementedError",
                 n=todo)
    return case_line(first_failing(result))


def _colon():
    return T(": ", "：")                                   # a Chinese report uses the full-width colon


def case_line(c):
    line = _colon().join((c['function'], c['name'], c['message']))
    if c.get("diagnosis"):
        line += T(" — ", "——") + c["diagnosis"]["says"]
    return line


def report_lines(ex, result, verbose=True):
    """The report as lines of text: the verdict, then (verbose) every case, the numbers for the first failure."""
    out = []
    add = out.append
    mark = {"pass": "✓", "fail": "✗", "todo": "·", "error": "✗"}[result["status"]]
    add(f"{mark} {ex.id} {text(ex.title)}{_colon()}{summary_line(result)}")
    if result.get("note"):
        add("    " + result["note"])
    if not verbose or result["error"]:
        return out
    detailed, named = False, set()
    for c in result["cases"]:
        tick = "✓" if c["ok"] else ("·" if c["todo"] else "✗")
        if c["ok"] or c["todo"]:
            add(f"    {tick} {c['function']}{_colon()}{c['name']}")
            continue
        add(f"    {tick} " + _colon().join((c['function'], c['name'], c['message'])))   # every failing case: its reason
        if c.get("diagnosis") and c["diagnosis"]["name"] not in named:       # each known mistake named once
            named.add(c["diagnosis"]["name"])
            add(f"        → {c['diagnosis']['says']}")
        if detailed or c.get("stopped"):
            continue
        detailed = True                                          # the numbers for the first failure only
        d = c["detail"]
        add(T("        input: {i}", "        输入：{i}", i=T(", ", "、").join(d.get("inputs", []))))
        if "expected" in d:
            add(T("        expected {e}, got {g}", "        期望 {e}，得到 {g}", e=d["expected"], g=d["got"]))
        if "max_abs" in d:
            add(T("        max |difference| {a:.3g}, max relative {r:.3g}; {w:.1%} of values within tolerance ({t})",
                    "        最大绝对差 {a:.3g}，最大相对差 {r:.3g}；{w:.1%} 的数值在容差内（{t}）",
                    a=d["max_abs"], r=d["max_rel"], w=d["within"], t=d["tolerance"]))
        if d.get("first_index") is not None and "expected_value" in d:
            add(T("        first mismatch at index {i}: expected {e}, got {g}",
                    "        第一个不一致的位置 {i}：期望 {e}，得到 {g}", i=d["first_index"], e=d["expected_value"],
                    g=d["got_value"]))
    if result.get("printed"):
        add(T("    note: your code printed {n} line(s); the judge ignores them",
                "    提示：你的代码打印了 {n} 行；评测器会忽略它们", n=result["printed"]))
    return out
