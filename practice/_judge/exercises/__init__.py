"""The exercises, one file per group of chapters (ch01_03.py, ch04_06.py, ...), found automatically.

How an exercise is graded: the judge builds each case's inputs and computes the expected value
in its own process; the learner's functions run in a sandbox process that only receives the
inputs and sends back plain data (tensors as raw bytes + dtype + shape, numbers, strings,
lists, dicts; never pickle); the judge compares within the case's stated tolerance and, when a
case fails, names the known mistake whose numerical signature the result matches.

Add an exercise in 5 steps (say 207, `rope_rotate`, in chapters 4-6):
  1. practice/_judge/starters/207_rope_rotate.py: the statement (English, then 中文), the
     tolerance it is checked to (`Tol.text()` gives the sentence), and the functions raising
     NotImplementedError. The learner's file is created from it.
  2. practice/_judge/solutions/s207.py: the reference solution. (--solution shows it after a pass.)
  3. practice/_judge/wrong/207_<mistake>.py: one file per known mistake (wrong on purpose).
  4. In practice/_judge/exercises/ch04_06.py (create it for a new group), write
     `def cases_207(ctx) -> [Case]` (inputs built from `ctx`, expected values computed here from
     qwen/ or an independent formula) and append to the module's `EXERCISES` list:
        Exercise("207", "rope_rotate", ("Rotate q and k", "旋转 q 和 k"), "medium", True,
                 functions=("rotate_half",), hints=[(en, zh), ...], cases=cases_207,
                 diagnoses=[Diagnosis("halves_swapped", "rotate_half", (en, zh), mistake=fn)],
                 wrong={"207_halves_swapped.py": "halves_swapped"})
     A `Diagnosis` recognizes a mistake by computing the mistaken formula on the case's inputs
     (`mistake(*args)`) and finding the learner's result equal to it, or by `test(case, got)`.
     In a module of several chapters, TAUGHT_IN = {"207": 4, ...} names the chapter that teaches
     each exercise (the list and the page show it); the default is the module's first chapter.
  5. python practice/judge.py --verify: the reference and every file in equivalent/ pass, the
     starter is "not finished", each wrong file fails with the diagnosis you named, and no
     diagnosis fires on the reference's results. tests/test_judge.py runs --verify.

Case inputs may be tensors (their layout is kept: a transposed or expanded input arrives as
such), numbers, strings, None, lists, tuples, dicts, types.SimpleNamespace (e.g. a layer cache)
and qwen's own dataclasses (e.g. Config). Results may be the same, except dataclasses; a tuple or
dict of tensors is compared tensor by tensor with the case's tolerance. Exercise ids are unique
strings ("207"); a module may define any number of exercises; `wrong` maps a file to one
diagnosis name or a tuple of them.
"""
import dataclasses
import importlib
import pkgutil
from pathlib import Path

from qwen.lang import T

HERE = Path(__file__).resolve().parent
JUDGE = HERE.parent                                  # practice/_judge: starters/, solutions/, wrong/


def text(pair_or_str):
    """A learner-facing string from an (en, zh) pair (or a string already in the right language)."""
    if isinstance(pair_or_str, tuple):
        return T(*pair_or_str)
    return pair_or_str


@dataclasses.dataclass(frozen=True)
class Tol:
    """How close a result must be. atol/rtol: |got - expected| <= atol + rtol * |expected| per value.
    ulps: for bf16/fp16 results, at most this many representable steps apart (replaces atol/rtol).
    exact_share: at least this fraction of the values bit for bit identical."""
    atol: float = 0.0
    rtol: float = 0.0
    ulps: int = None
    exact_share: float = 0.0

    def text(self, dtype_name=""):
        parts = []
        if self.ulps is not None:
            parts.append(T("within {n} {d} step(s) of the expected value", "与期望值相差不超过 {n} 个 {d} 最小间隔",
                           n=self.ulps, d=dtype_name or "bf16/fp16"))
        else:
            parts.append(T("atol={a:g}, rtol={r:g}", "atol={a:g}、rtol={r:g}", a=self.atol, r=self.rtol))
        if self.exact_share:
            parts.append(T("{p:.0%} of values bit for bit equal", "{p:.0%} 的数值逐位相同", p=self.exact_share))
        return T("; ", "；").join(parts)


# The default per output dtype: fp32 and fp64 close; bf16/fp16 "computed in fp32, rounded once":
# within 1 step, and 99% of the values identical (fp32 then one rounding gives the same bits
# whatever the order of operations; computing in bf16 does not).
DEFAULT_TOL = {"float64": Tol(1e-9, 1e-9), "float32": Tol(1e-5, 1e-5),
               "bfloat16": Tol(ulps=1, exact_share=0.99), "float16": Tol(ulps=1, exact_share=0.99)}


@dataclasses.dataclass
class Case:
    """One call of one learner function. Built in the judge process; `args` are sent to the sandbox
    (tensors keep their layout: a non-contiguous input arrives non-contiguous)."""
    function: str                      # which learner function
    name: object                       # (en, zh) or a string: what this case is
    args: tuple                        # positional arguments (tensors, numbers, strings, lists, dicts)
    expected: object                   # the value to match (tensor or plain), or None when `check` decides
    tol: Tol = None                    # None: DEFAULT_TOL for the expected dtype (plain floats: rel 1e-9)
    about: object = None               # (en, zh): what the case tests and where to look (--hint)
    check: object = None               # optional fn(got) raising compare.Mismatch (runs in the judge)


@dataclasses.dataclass
class Diagnosis:
    """A known mistake, recognized by its numerical signature on a failing case of `function`."""
    name: str                          # id used in `Exercise.wrong` and --verify
    function: str
    says: tuple                        # (en, zh): "looks like ...: your output equals ..."
    mistake: object = None             # fn(*case.args) -> the mistaken result (judge process)
    test: object = None                # or fn(case, got) -> bool (got: decoded value or compare.Raised)
    tol: Tol = None                    # how close to the mistaken result (default: the case's)
    hint: int = None                   # index in Exercise.hints of the hint about the mistaken part (--hint
                                       # shows that one instead of the next, which may be about a right part)


@dataclasses.dataclass
class Exercise:
    id: str
    slug: str
    title: tuple                       # (en, zh)
    difficulty: str                    # easy / medium / hard
    needs_torch: bool
    functions: tuple
    hints: list                        # [(en, zh)], shown one level at a time (after the first failing case)
    cases: object                      # fn(ctx) -> [Case], runs in the judge process
    diagnoses: list = dataclasses.field(default_factory=list)
    wrong: dict = dataclasses.field(default_factory=dict)    # {file in wrong/: diagnosis name, or text in the report}
    chapter: str = ""                  # set from the module name (ch01_03) when empty
    taught_in: int = 0                 # the chapter that teaches it (the list shows it); when 0, the module's
                                       # TAUGHT_IN {id: chapter}, else its first chapter (ch10_11: 10)
    may_modify_inputs: bool = False    # True: the statement allows changing an input in place (the judge
                                       # keeps its own copy); False: it says "Do not modify the inputs"
    uses_model: bool = True            # False: the cases read nothing of the checkpoint (a pure function of
                                       # numbers), so no "graded on the tiny checkpoint" note goes with them

    @property
    def filename(self):
        return f"{self.id}_{self.slug}.py"

    @property
    def starter(self):
        return JUDGE / "starters" / self.filename

    @property
    def solution(self):
        return JUDGE / "solutions" / f"s{self.id}.py"

    def equivalents(self):
        """Other correct solutions (equivalent forms) in equivalent/: --verify requires them to pass."""
        return sorted((JUDGE / "equivalent").glob(f"{self.id}_*.py"))


class Context:
    """What cases are built from: the model's tensors (the real checkpoint if present, else the tiny
    one), a scratch folder for files, and seeded generators."""

    def __init__(self, model_path, scratch):
        from engine.tiny import is_tiny
        from qwen.config import Config
        from engine.checkpoint import open_weights
        self.path = Path(model_path)
        self.cfg = Config.load(self.path)
        self.W = open_weights(self.path)
        self.tiny = is_tiny(self.cfg)
        self.scratch = Path(scratch)

    @property
    def label(self):
        return T("tiny", "小检查点") if self.tiny else "Qwen3.5"

    @property
    def label_of(self):
        """The label as a Chinese possessive ('小检查点的', 'Qwen3.5 的'): 小检查点的配置, not 小检查点 配置."""
        return "小检查点的" if self.tiny else "Qwen3.5 的"

    @property
    def checkpoint_zh(self):
        """'the tiny checkpoint' / 'the Qwen3.5 checkpoint' in Chinese: 小检查点, not 小检查点 检查点."""
        return "小检查点" if self.tiny else "Qwen3.5 检查点"

    @staticmethod
    def gen(seed):
        import torch
        return torch.Generator().manual_seed(seed)


def _discover():
    exercises = []
    for info in sorted(pkgutil.iter_modules([str(HERE)]), key=lambda m: m.name):
        if not info.name.startswith("ch"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        chapters = [int(n) for n in info.name[2:].split("_") if n.isdigit()]
        for ex in module.EXERCISES:
            ex.chapter = ex.chapter or info.name
            ex.taught_in = ex.taught_in or getattr(module, "TAUGHT_IN", {}).get(ex.id) or chapters[0]
            if not chapters[0] <= ex.taught_in <= chapters[-1]:
                raise RuntimeError(f"exercise {ex.id}: taught_in {ex.taught_in} is outside {info.name}")
            exercises.append(ex)
    exercises.sort(key=lambda e: e.id)
    ids = [e.id for e in exercises]
    duplicated = sorted({i for i in ids if ids.count(i) > 1})
    if duplicated:
        raise RuntimeError(f"exercise ids defined twice: {duplicated}")
    return exercises


EXERCISES = _discover()
BY_ID = {e.id: e for e in EXERCISES}
