"""The chapters' figures (--plot, or QWEN_PLOT=1): the backend, a font that draws every label,
the one folder the PNGs go to, and showing them inline in a notebook.

- Backend: on the command line the figures are only written, so matplotlib gets Agg (no window,
  no display needed). Inside a Jupyter kernel the backend is left to Jupyter, and each figure is
  shown inline where it is made, as well as written.
- Folder: --out, else $QWEN_FIGURES, else out/figures (under the folder you run from; the
  repository's .gitignore covers out/). Each written path is printed.
- Font: matplotlib's own DejaVu Sans has no Chinese glyphs; it draws a box for each, with a
  "Glyph ... missing" warning. A CJK font is looked up by name in matplotlib's font list, then by
  file in the usual places of Linux, macOS and Windows (a font installed after matplotlib built its
  font cache is not in that list). A font counts only if it really has the glyphs. Without one,
  labels stay in English and a token the fonts cannot draw is labelled by its id (#12345); any
  other character they lack is written as an escape (\\u6cd5). No glyph is ever left to a box.
"""
import os
import sys
from pathlib import Path

from qwen.lang import QwenError, get_lang, tr

FIGURES = os.path.join("out", "figures")      # the default folder, relative to where you run from

# Family names, preferred first: Simplified Chinese faces, then any other face with the Han glyphs.
CJK_FONTS = (
    "Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "Source Han Sans CN",   # Linux (and installed by hand)
    "WenQuanYi Micro Hei", "WenQuanYi Zen Hei", "Droid Sans Fallback", "AR PL UMing CN", "AR PL UKai CN",
    "PingFang SC", "Hiragino Sans GB", "Heiti SC", "STHeiti", "Songti SC", "Arial Unicode MS",   # macOS
    "Microsoft YaHei", "DengXian", "SimHei", "SimSun", "Microsoft JhengHei",           # Windows
    "Noto Sans CJK JP", "Noto Sans CJK TC", "Noto Sans CJK KR", "Noto Serif CJK SC", "Noto Sans CJK HK",
)
CJK_KEYWORDS = ("CJK", "Han Sans", "WenQuanYi", "YaHei", "PingFang", "Hei", "Song", "Ming", "Kai")
PROBE = "中文的法国"                           # a font must have these glyphs to count as a CJK font


def cjk_files():
    """Where the usual CJK fonts live, as files (tried when matplotlib's font list has none)."""
    windows = os.path.join(os.environ.get("WINDIR", r"C:\Windows"), "Fonts")
    return (
        "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",           # Debian, Ubuntu: fonts-noto-cjk
        "/usr/share/fonts/noto-cjk/NotoSansCJK-Regular.ttc",                # Arch: noto-fonts-cjk
        "/usr/share/fonts/google-noto-cjk/NotoSansCJK-Regular.ttc",         # Fedora: google-noto-sans-cjk-fonts
        "/usr/share/fonts/google-noto-sans-cjk-vf-fonts/NotoSansCJK-VF.ttc",
        "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",                   # Debian, Ubuntu: fonts-wqy-microhei
        "/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc",
        "/usr/share/fonts/wenquanyi/wqy-microhei/wqy-microhei.ttc",
        "/System/Library/Fonts/PingFang.ttc",                               # macOS
        "/System/Library/Fonts/Hiragino Sans GB.ttc",
        "/System/Library/Fonts/STHeiti Light.ttc",
        "/Library/Fonts/Arial Unicode.ttf",
        os.path.join(windows, "msyh.ttc"), os.path.join(windows, "simhei.ttf"),   # Windows
        os.path.join(windows, "simsun.ttc"), os.path.join(windows, "Deng.ttf"),
    )


def in_notebook():
    """True inside a Jupyter (IPython) kernel, where figures can be shown inline."""
    return "ipykernel" in sys.modules


def figures_folder(out=None):
    """The folder for the PNGs: --out, else $QWEN_FIGURES, else out/figures."""
    return Path(out or os.environ.get("QWEN_FIGURES") or FIGURES)


def _charmap(path):
    """The code points a font file has glyphs for (face 0 of a .ttc)."""
    from matplotlib.ft2font import FT2Font
    try:
        return set(FT2Font(str(path)).get_charmap())
    except (OSError, RuntimeError, ValueError):
        return set()


def _has_glyphs(path, text=PROBE):
    return set(map(ord, text)) <= _charmap(path)


def find_cjk_font():
    """(family name, file) of a font with Chinese glyphs, or None: by name in matplotlib's font list,
    then by file in the usual places (added to matplotlib's list when found)."""
    from matplotlib import font_manager
    fm = font_manager.fontManager
    files = {}
    for f in fm.ttflist:
        files.setdefault(f.name, f.fname)
    named = [n for n in CJK_FONTS if n in files]
    named += sorted(n for n in files if n not in named and any(k in n for k in CJK_KEYWORDS))
    for name in named:
        if _has_glyphs(files[name]):
            return name, files[name]
    for path in cjk_files():
        if os.path.isfile(path) and _has_glyphs(path):
            try:
                fm.addfont(path)
                return font_manager.FontProperties(fname=path).get_name(), path
            except (OSError, RuntimeError, ValueError):
                continue
    return None


class Fonts:
    """The fonts the figures are drawn with, and what they can draw."""

    def __init__(self):
        from matplotlib import font_manager, rcParams
        families = list(rcParams["font.family"])
        base = font_manager.findfont(font_manager.FontProperties(family=families[:1]))
        self.cjk = find_cjk_font()                          # (name, file) or None
        self.glyphs = _charmap(base)
        if self.cjk:
            name, path = self.cjk
            self.glyphs |= _charmap(path)
            # the usual font first (the Latin letters), the CJK font for the glyphs it lacks:
            # matplotlib >= 3.6 falls back glyph by glyph along font.family (not along font.sans-serif)
            rcParams["font.family"] = [f for f in families if f != name] + [name]

    def can_draw(self, text):
        return all(c.isspace() or ord(c) in self.glyphs for c in str(text))

    def escape(self, text):
        """text with every character the fonts lack written as an escape: '法' -> '\\u6cd5'."""
        return "".join(c if self.can_draw(c) else c.encode("unicode_escape").decode("ascii") for c in str(text))


_fonts = None
_said_no_font = False


def fonts():
    """The fonts, looked up once per process."""
    global _fonts
    if _fonts is None:
        _fonts = Fonts()
    return _fonts


def _say_no_font():
    """One line per run, when a CJK font would have been used and none was found."""
    global _said_no_font
    if not _said_no_font:
        _said_no_font = True
        print(tr("  (no CJK font found: tokens the figures cannot draw are labelled by id, e.g. #12345; "
                 "install one, e.g. fonts-noto-cjk on Linux)",
                 "  没有找到中文字体（如 Noto Sans CJK）：图中的标签用英文，画不出来的词元用编号表示（如 #12345）；"
                 "装一个中文字体即可（Linux：fonts-noto-cjk；macOS 和 Windows 自带）。"))


def pyplot():
    """matplotlib.pyplot ready to draw, or None (with one line) when matplotlib is not installed.
    Returns (plt, lang): lang is the language the labels can be written in."""
    try:
        import matplotlib
        if not in_notebook():
            matplotlib.use("Agg")                           # write PNGs only: no window, no display
        import matplotlib.pyplot as plt
    except ImportError:
        print(tr("  --plot needs matplotlib: pip install -e .[plot] (the printed numbers are the same)",
                 "  --plot 需要 matplotlib：pip install -e .[plot]（打印出来的数字是一样的）"))
        return None, get_lang()
    lang = get_lang()
    if lang == "zh" and not fonts().cjk:
        _say_no_font()
        lang = "en"
    return plt, lang


def token_labels(ids, pieces):
    """Tick labels for tokens: the piece where the fonts can draw it, else its id ('#12345')."""
    f = fonts()
    labels = [p if f.can_draw(p) else f"#{i}" for i, p in zip(ids, pieces)]
    if labels != list(pieces):
        _say_no_font()
    return labels


def save(fig, name, out=None):
    """Write the figure as <folder>/name, print the path; in a notebook show that PNG inline too
    (whatever the kernel's backend). The figure is closed afterwards: Jupyter's inline backend
    would otherwise show it a second time at the end of the cell."""
    import matplotlib.pyplot as plt
    path = figures_folder(out) / name
    fig.tight_layout()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
    except OSError as e:                          # a file in the way, no such place, no permission
        raise QwenError("Cannot write the figure {p} ({e}): choose another folder with --out DIR or QWEN_FIGURES.",
                        "无法写出图片 {p}（{e}）：请用 --out DIR 或 QWEN_FIGURES 换一个文件夹。",
                        p=path, e=e.strerror or e) from None
    print(tr("  wrote {p}", "  已写出 {p}", p=path))
    if in_notebook():
        try:
            from IPython.display import Image, display
            display(Image(filename=str(path)))
        except ImportError:
            pass
    plt.close(fig)
    return path
