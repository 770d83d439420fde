"""The sandboxed side of the judge: grades one learner file in its own process.

    python practice/_judge/runner.py EXERCISE FILE RESULT.json LANG MODEL_PATH MEMORY_BYTES

The judge starts this with a time limit; here the process caps its own memory, computes every
expected value first (so learner code cannot disturb them), then imports the learner's file
with its output captured, calls each function on copies of the inputs, and writes the results
as JSON to RESULT.json (never to stdout, which the learner's prints may fill).
"""
import contextlib
import io
import json
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def limit_memory(nbytes):
    try:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (nbytes, nbytes))
    except (ImportError, ValueError, OSError):                  # not on this platform: time limit only
        pass


def learner_line(tb, file):
    """The last line of the learner's file in a traceback, or None."""
    lines = [f.lineno for f in traceback.extract_tb(tb) if Path(f.filename).resolve() == Path(file).resolve()]
    return lines[-1] if lines else None


def describe_error(exc, file, memory_gb):
    from qwen.lang import T
    text = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    if isinstance(exc, MemoryError) or "can't allocate memory" in str(exc):
        return "memory", T("tried to allocate more memory than the {gb:.0f} GB allowed (a huge tensor or read?)",
                           "申请的内存超过了允许的 {gb:.0f} GB（张量或读取的数据太大了？）", gb=memory_gb)
    line = learner_line(exc.__traceback__, file)
    where = T(" (line {n} of your file)", "（你的文件第 {n} 行）", n=line) if line else ""
    return "exception", text + where


def main(exercise_id, file, result_file, lang, model_path, memory):
    """Grade `file` for one exercise and write the result to `result_file` (JSON)."""
    memory = int(memory)
    limit_memory(memory)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from qwen.lang import T, set_lang
    set_lang(lang)
    result = {"exercise": exercise_id, "file": file, "status": "error", "cases": [], "error": None, "printed": 0}

    def finish():
        Path(result_file).write_text(json.dumps(result, ensure_ascii=False), encoding="utf-8")

    import tempfile

    import torch
    torch.set_num_threads(1)                                     # two gradings share the two cores

    from practice._judge.compare import Mismatch, check_tensor, check_value, describe
    from practice._judge.exercises import BY_ID, Context
    ex = BY_ID[exercise_id]
    source = Path(file).read_text(encoding="utf-8")
    try:
        code = compile(source, file, "exec")
    except SyntaxError as e:
        result["error"] = {"kind": "syntax", "line": e.lineno,
                           "message": T("syntax error on line {n}: {m}", "第 {n} 行有语法错误：{m}", n=e.lineno, m=e.msg)}
        return finish()

    with tempfile.TemporaryDirectory() as scratch:               # expected values first, untouched by learner code
        cases = ex.cases(Context(model_path), Path(scratch))
        inputs = [tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in c.args) for c in cases]

        printed = io.StringIO()
        module = {"__name__": f"learner_{exercise_id}", "__file__": file}
        try:
            with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
                exec(code, module)
        except SystemExit:
            result["error"] = {"kind": "exit", "message": T("your file calls sys.exit() (or exit()) when imported: remove it",
                                                            "你的文件在导入时调用了 sys.exit()（或 exit()）：请删掉")}
            return finish()
        except ImportError as e:
            result["error"] = {"kind": "import", "message": T("import failed: {m}", "导入失败：{m}", m=e)}
            return finish()
        except BaseException as e:                               # noqa: BLE001 - learner code can raise anything
            kind, message = describe_error(e, file, memory / 2**30)
            result["error"] = {"kind": kind, "message": T("error while importing your file: {m}", "导入你的文件时出错：{m}",
                                                          m=message)}
            return finish()
        for name in ex.functions:
            if not callable(module.get(name)):
                result["error"] = {"kind": "missing", "message": T(
                    "no function named {f} in {file}: keep the names from the starter",
                    "{file} 里没有名为 {f} 的函数：请保留起始文件里的函数名", f=name, file=Path(file).name)}
                return finish()

        for case, args in zip(cases, inputs):
            entry = {"function": case.function, "name": case.name, "ok": False, "todo": False, "message": "",
                     "detail": {"inputs": [describe(a) for a in args]}}
            result["cases"].append(entry)
            call_args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
            try:
                with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
                    got = module[case.function](*call_args)
            except NotImplementedError:
                entry["todo"] = True
                entry["message"] = T("not written yet (raises NotImplementedError)", "还没写（抛出 NotImplementedError）")
                continue
            except SystemExit:
                entry["message"] = T("called sys.exit()", "调用了 sys.exit()")
                continue
            except BaseException as e:                           # noqa: BLE001
                entry["message"] = describe_error(e, file, memory / 2**30)[1]
                continue
            changed = [i for i, (a, b) in enumerate(zip(call_args, args))
                       if isinstance(a, torch.Tensor) and not torch.equal(a, b) and not (a.isnan().any() and b.isnan().any())]
            if changed:
                entry["message"] = T("modified its input #{i} in place: work on a copy (no in-place ops on inputs)",
                                     "原地修改了第 {i} 个输入：请在副本上计算（不要对输入做原地操作）", i=changed[0] + 1)
                continue
            try:
                if isinstance(case.expected, torch.Tensor):
                    check_tensor(case.expected, got, case.tol)
                else:
                    check_value(case.expected, got, case.function)
                entry["ok"] = True
            except Mismatch as m:
                entry["message"] = m.summary
                entry["detail"].update(m.detail)
        result["printed"] = len([line for line in printed.getvalue().splitlines() if line.strip()])
    cases_ok = [c["ok"] for c in result["cases"]]
    if all(cases_ok):
        result["status"] = "pass"
    elif all(c["ok"] or c["todo"] for c in result["cases"]):
        result["status"] = "todo"
    else:
        result["status"] = "fail"
    return finish()


if __name__ == "__main__":
    main(*sys.argv[1:7])
