"""Notebook functions for the sandbox, a fresh process: their source text, and what they use from the
notebook, so that they run there as they run in the cell.

A function from a cell reads names the cell's notebook defines: a helper function, `import math
as m`, a constant `EPS = 1e-6`, or a variable it closes over. Each name its code reads is sent
as: a module (by name), an importable function or class (module and name), another notebook
function (its source, and in turn what it uses), or a plain value (numbers, strings, lists of
them). Anything else is left out, and using it reads as a NameError naming it.
"""
import importlib
import inspect
import json
import textwrap
import types

from qwen.lang import T


class NotPortable(Exception):
    """A function that cannot be sent as source (one line)."""


def _names(code):
    """Every global name a code object (and the functions nested in it) reads."""
    out = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out |= _names(const)
    return out


def _importable(value, name):
    """(module, attribute path) when `value` can be imported back by name, else None."""
    module = getattr(value, "__module__", None)
    if not isinstance(module, str) or not module or module == "__main__":
        return None
    try:
        found_module = importlib.import_module(module)
    except Exception:                                            # noqa: BLE001 - not importable: not sent that way
        return None
    for path in (getattr(value, "__qualname__", None), getattr(value, "__name__", None), name):
        if not isinstance(path, str) or "<" in path:
            continue
        found = found_module
        try:
            for part in path.split("."):
                found = getattr(found, part)
        except Exception:                                        # noqa: BLE001
            continue
        if found is value:
            return module, path
    return None


def _plain(value):
    try:
        json.dumps(value, allow_nan=True)
    except (TypeError, ValueError):
        return False
    return True


def pack(functions):
    """{exercise name: function} -> {"defs": [source], "env": {name: how}, "names": {exercise name: def name}}."""
    defs, env, seen = [], {}, set()

    def visit(f):
        if id(f) in seen:
            return
        seen.add(id(f))
        if f.__name__ == "<lambda>":
            raise NotPortable(T("a lambda cannot be sent to a fresh process: define it with def in a cell",
                                "lambda 无法发送到新的进程：请在单元格中用 def 定义它"))
        try:
            defs.append(textwrap.dedent(inspect.getsource(f)))
        except (OSError, TypeError) as e:
            raise NotPortable(T("the source of {f} cannot be found ({e}); define it in a notebook cell or a file",
                                "找不到 {f} 的源代码（{e}）；请在 notebook 单元格或文件中定义它", f=f.__name__, e=e)) from None
        scope = dict(f.__globals__)
        for name, cell in zip(f.__code__.co_freevars, f.__closure__ or ()):
            try:
                scope[name] = cell.cell_contents                 # a closure's variable: a global once re-defined
            except ValueError:
                pass
        for name in sorted((_names(f.__code__) | set(f.__code__.co_freevars)) & scope.keys()):
            value = scope[name]
            if name in env or name == f.__name__:
                continue
            if isinstance(value, types.ModuleType):
                env[name] = {"module": value.__name__}
            elif _importable(value, name):
                env[name] = {"import": list(_importable(value, name))}
            elif isinstance(value, types.FunctionType) and value.__name__ == name:
                visit(value)                                     # another function of the notebook
            elif _plain(value):
                env[name] = {"value": value}

    for f in functions.values():
        if not isinstance(f, types.FunctionType):
            raise NotPortable(T("{f} is not a function defined with def: a fresh process needs its source",
                                "{f} 不是用 def 定义的函数：新的进程需要它的源代码", f=type(f).__name__))
        visit(f)
    return {"defs": defs, "env": env, "names": {n: f.__name__ for n, f in functions.items()}}


def unpack(packed):
    """In the fresh process: {exercise name: function}, defined as they were in the notebook."""
    space = {"__name__": "__notebook__"}
    for name, how in packed["env"].items():
        if "module" in how:
            space[name] = importlib.import_module(how["module"])
        elif "import" in how:
            value = importlib.import_module(how["import"][0])
            for part in how["import"][1].split("."):
                value = getattr(value, part)
            space[name] = value
        else:
            space[name] = how["value"]
    for source in packed["defs"]:
        exec(compile(source, "<notebook>", "exec"), space)
    return {n: space.get(d) for n, d in packed["names"].items()}
