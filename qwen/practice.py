"""`check()` for a notebook in any folder: `from qwen.practice import check`.

Why: the judge lives in the repository's `practice/` folder, which is not an installed package
(the learner's exercise files are written there), so `from practice import check` works only
when Python starts in the repository's root. `qwen` is installed (`pip install -e .` keeps it
in the repository), so it can find `practice/` beside itself and import it from there.
"""
import sys
from pathlib import Path

from qwen.lang import QwenError

REPO = Path(__file__).resolve().parents[1]                      # the folder that holds qwen/ and practice/


def check(exercise, *functions, **options):
    """practice.check (same arguments): grade notebook functions for `exercise`."""
    return _practice().check(exercise, *functions, **options)


def _practice():
    """The repository's practice package, importable by name (the judge's modules import it so)."""
    folder = REPO / "practice"
    if not (folder / "__init__.py").is_file():
        raise QwenError("No practice/ folder next to {qwen}: the exercises come with the repository. Install the "
                        "course from it with pip install -e . (or open the notebook in its root).",
                        "{qwen} 旁边没有 practice/ 文件夹：练习随仓库提供。请在仓库里用 pip install -e . 安装课程"
                        "（或在仓库根目录打开 notebook）。", qwen=REPO / "qwen")
    if str(REPO) not in sys.path:
        sys.path.append(str(REPO))                               # last: the learner's own modules come first
    import practice
    if Path(practice.__file__).resolve().parent != folder:
        raise QwenError("'practice' is another module here ({other}), not the course's {ours}. Rename yours, or "
                        "start the notebook in another folder.",
                        "这里的 practice 是另一个模块（{other}），不是课程的 {ours}。请给你的模块改名，或在别的文件夹"
                        "启动 notebook。", other=practice.__file__, ours=folder)
    return practice
