"""The package's structure, read from the source: who imports whom, and which files are the lesson.

The rule enforced on qwen/'s import graph (built with ast; an import at a module's top level and one
inside a function are listed apart):
  1. no cycle among module-level imports;
  2. the model and its parts (LESSON_MODEL) import nothing above them, at any level: no generation,
     no download, no command line (the model depends only on its parts);
  3. with both kinds together there is no cycle either, but for the function-level imports listed in
     LATE_CYCLES with their reason.
"""
import ast
import re

from conftest import ROOT

QWEN = ROOT / "qwen"
MODULES = sorted(p.stem for p in QWEN.glob("*.py"))
# What the model is built from: it may import these and qwen/config, files, lang, weights (reading).
LESSON_MODEL = {"embedding", "norm", "mlp", "rope", "attention", "deltanet", "cache", "vision", "image", "model"}
BELOW_MODEL = LESSON_MODEL | {"config", "files", "lang", "weights", "hub", "tiny", "tokenizer"}
# No import cycle is allowed: qwen/mtp.py loads its head into a model (load_head) and runs speculative
# decoding itself; neither qwen/model.py nor qwen/generate.py imports it.
LATE_CYCLES = {}


def _targets(node):
    """The qwen modules one import statement names."""
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        if node.module == "qwen":
            return {a.name for a in node.names if a.name in MODULES}
        if node.module.startswith("qwen."):
            return {node.module.split(".")[1]}
    if isinstance(node, ast.Import):
        return {a.name.split(".")[1] for a in node.names if a.name.startswith("qwen.")}
    return set()


def import_graph(folder=QWEN):
    """{module: (module-level imports, function-level imports)} of the package in `folder`."""
    graph = {}
    for path in sorted(folder.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = set().union(*(_targets(n) for n in tree.body), set())
        inner = set()
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner |= set().union(*(_targets(n) for n in ast.walk(fn)), set())
        graph[path.stem] = (top - {path.stem}, inner - top - {path.stem})
    return graph


def _reaches(edges, start, goal):
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        if m == goal:
            return True
        if m not in seen:
            seen.add(m)
            todo += edges.get(m, ())
    return False


def _cycle_edges(edges):
    """The edges a -> b that lie on a cycle (b leads back to a)."""
    return sorted((a, b) for a in edges for b in edges[a] if _reaches(edges, b, a))


def test_no_cycle_among_module_level_imports():
    graph = import_graph()
    assert _cycle_edges({m: top for m, (top, _) in graph.items()}) == []


def test_the_model_imports_only_its_parts():
    """qwen/model.py took its Cache from qwen/generate.py: the model depended on generation."""
    graph = import_graph()
    for m in sorted(LESSON_MODEL & graph.keys()):
        top, inner = graph[m]
        assert top <= BELOW_MODEL, (m, top - BELOW_MODEL)
        assert inner <= BELOW_MODEL | {"mtp"}, (m, inner - BELOW_MODEL)
    assert "generate" not in graph["model"][0] | graph["model"][1]


def test_no_cycle_even_through_late_imports_but_the_listed_ones():
    """engine/hub.py and qwen/weights.py imported each other (weights lazily, for find_model)."""
    graph = import_graph()
    edges = {m: top | inner for m, (top, inner) in graph.items()}
    for a, b in LATE_CYCLES:
        edges[a] = edges[a] - {b}
    assert _cycle_edges(edges) == []
    for a, b in LATE_CYCLES:                                        # each listed one is late, and still needed
        assert b in graph[a][1] and b not in graph[a][0], (a, b)


def test_the_learners_import_paths_still_work():
    from qwen.generate import Cache, LayerCache                     # tests, notebooks
    from qwen.weights import Config, load, load_weights  # noqa: F401  (qwen/weights.py's docstring)
    from engine.hub import find_model
    import qwen.cache
    assert Cache is qwen.cache.Cache and LayerCache is qwen.cache.LayerCache


def _raises_outside_checks(path):
    """(function, line) of each raise outside a `_check_...` function of the module at `path`."""
    found = []

    def walk(node, owner):
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else owner
            if isinstance(child, ast.Raise) and not (owner or "").startswith("_check"):
                found.append((owner, child.lineno))
            walk(child, name)
    walk(ast.parse(path.read_text(encoding="utf-8")), None)
    return found


def test_forward_paths_read_as_the_math():
    """The bad-input checks of the norms and the delta rule stood in the middle of the forward paths
    (delta_rule_chunked's chunk, causal_conv's window, GatedRMSNorm's gate): each module keeps them
    in its `_check_...` functions, with the same messages (tests/test_norm.py, test_deltanet.py)."""
    for module in ("norm", "deltanet"):
        assert _raises_outside_checks(QWEN / f"{module}.py") == [], module


def _listed(text, start, end=None, pattern=r"\b(\w+)\.py\b"):
    """The `name.py` file names between the text `start` and the text `end`."""
    part = text[text.index(start):text.index(end) if end else None]
    return re.findall(pattern, part, flags=re.M)


def _split(doc):
    """(lesson, plumbing) of the package docstring: the file each of its list's lines starts with."""
    line = r"^    (\w+)\.py "
    return (_listed(doc, "The lesson:", "The course's plumbing", line), _listed(doc, "The course's plumbing", None, line))


def test_the_package_docstring_lists_every_file_once_as_lesson_or_plumbing():
    """A reader of qwen/ sees first which files are the lesson and which the plumbing."""
    import qwen
    doc = qwen.__doc__
    lesson, plumbing = _split(doc)
    files = [m for m in MODULES if m != "__init__"]
    assert sorted(lesson + plumbing) == files                      # each exactly once, none made up
    chapters = [int(c) for c in re.findall(r"^    \w+\.py +ch(\d\d) ", doc, flags=re.M)]
    assert len(chapters) == len(lesson) and chapters == sorted(chapters)   # the lesson in chapter order


def test_the_readme_names_the_same_split_in_both_languages():
    import qwen
    lesson, plumbing = _split(qwen.__doc__)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## The `qwen` package"):readme.index("```python", readme.index("## The `qwen` package"))]
    english, chinese = section[:section.index("课程本身")], section[section.index("课程本身"):]
    for text, rest in ((english, "The rest of"), (chinese, "其余的文件")):
        assert _listed(text, text[:10], rest) == lesson
        assert sorted(_listed(text, rest)) == sorted(plumbing + ["__init__"])
