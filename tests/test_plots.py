"""--plot: where the PNGs go, the font that draws the labels (with a CJK font and without one),
QWEN_PLOT=1, `main.py --plot`, and figures shown inline in a notebook.

No test depends on the machine's fonts: the CJK font lookup is pointed at an empty list (a machine
without one) or at a small font made here with fontTools (a machine with one).
"""
import json
import re
import subprocess
import warnings

import pytest

from conftest import ROOT

pytest.importorskip("matplotlib")

NO_CJK_FONT = ("import engine.plots as plots\n"
               "plots.CJK_FONTS, plots.CJK_KEYWORDS = (), ()\n"       # as on a machine without a CJK font
               "plots.cjk_files = lambda: ()\n")

# the figures written, as data: titles, tick positions and labels, the lines' x values
RECORD_FIGURES = r"""
import json, os
from matplotlib.figure import Figure
seen = {}
_savefig = Figure.savefig
def savefig(fig, fname, *args, **kwargs):
    seen[os.path.basename(str(fname))] = {
        "suptitle": fig._suptitle.get_text() if fig._suptitle else "",
        "axes": [{"title": ax.get_title(), "xticks": [float(x) for x in ax.get_xticks()],
                  "xlabels": [t.get_text() for t in ax.get_xticklabels()],
                  "ylabels": [t.get_text() for t in ax.get_yticklabels()],
                  "lines": [[float(x) for x in line.get_xdata()] for line in ax.get_lines()]} for ax in fig.axes]}
    return _savefig(fig, fname, *args, **kwargs)
Figure.savefig = savefig
"""


def _run(code, cwd, env=None):
    """`python -c CODE` in a process of its own (forked from one that has imported torch: tests/forkserver.py)."""
    import os
    from forkserver import python
    full_env = {**os.environ, "PYTHONIOENCODING": "utf-8", "MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT),
                **(env or {})}
    return python(["-c", code], cwd=cwd, env=full_env, timeout=110)


def _figures(stdout):
    return json.loads(stdout.split("FIGURES ", 1)[1].splitlines()[0])


def test_ch08_in_chinese_without_a_cjk_font(tmp_path, tiny_path):
    """`main.py 8 --plot --tiny --lang zh` without a CJK font draws no token label as a box (no "Glyph
    missing" warning), writes its PNGs into the figures folder, not the folder it runs from (the repository
    root, not in .gitignore), numbers the RMS plot's layers as the table does ("embed, 0..7"), and has the
    tiny checkpoint's title.
    (The example sentence is English in both languages: --text gives the tokens Chinese glyphs.)"""
    code = (NO_CJK_FONT + RECORD_FIGURES +
            "import runpy, sys\n"
            f"sys.argv = [{str(ROOT / 'main.py')!r}, '8', '--plot', '--tiny', '--lang', 'zh', '--no-reference',\n"
            "            '--text', '法国的首都是']\n"
            "runpy.run_path(sys.argv[0], run_name='__main__')\n"
            "print('FIGURES ' + json.dumps(seen))\n")
    r = _run(code, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Glyph" not in r.stderr and "missing from font" not in r.stderr, r.stderr[-3000:]
    assert not list(tmp_path.glob("*.png"))                                 # not where it ran from
    folder = tmp_path / "out" / "figures"
    for name in ("ch08_stream_rms.png", "ch08_attention.png"):
        assert (folder / name).stat().st_size > 5_000, name
        assert f"已写出 {folder.relative_to(tmp_path) / name}" in r.stdout     # the path, printed
    assert r.stdout.count("没有找到中文字体") == 1                             # one line, not one per figure
    if (ROOT / ".git").exists():
        assert subprocess.run(["git", "check-ignore", "-q", "out/figures/ch08_attention.png"], cwd=ROOT).returncode == 0

    figures = _figures(r.stdout)
    rms, attention = figures["ch08_stream_rms.png"]["axes"][0], figures["ch08_attention.png"]["axes"][0]
    table = re.findall(r"^ +(嵌入|\d+) +[LF]? +[\d.]+ +[\d.]+$", r.stdout.split("3. ")[0], flags=re.M)
    assert table == ["嵌入"] + [str(i) for i in range(8)]                     # the tiny checkpoint's 8 layers
    assert rms["xlabels"] == ["embed"] + table[1:]                           # English labels: no CJK font
    assert all(line == rms["xticks"] for line in rms["lines"])              # point i sits at the table's row i
    for ax in (rms, attention):
        assert "tiny checkpoint: made-up numbers" in ax["title"]
    assert attention["xlabels"] and all(re.fullmatch(r"#\d+", t) for t in attention["xlabels"] + attention["ylabels"])


def _make_font(path, chars, family="Test CJK"):
    """A TrueType font with a square glyph for each of `chars` (and the space): a CJK font for tests."""
    from fontTools.fontBuilder import FontBuilder
    from fontTools.pens.ttGlyphPen import TTGlyphPen

    def square():
        pen = TTGlyphPen(None)
        pen.moveTo((100, 0))
        pen.lineTo((100, 700))
        pen.lineTo((800, 700))
        pen.lineTo((800, 0))
        pen.closePath()
        return pen.glyph()
    names = {ord(c): f"uni{ord(c):04X}" for c in chars}
    order = [".notdef", "space", *names.values()]
    fb = FontBuilder(1000, isTTF=True)
    fb.setupGlyphOrder(order)
    fb.setupCharacterMap({32: "space", **names})
    fb.setupGlyf({n: TTGlyphPen(None).glyph() if n == "space" else square() for n in order})
    fb.setupHorizontalMetrics({n: (1000, 100) for n in order})
    fb.setupHorizontalHeader(ascent=880, descent=-120)
    fb.setupNameTable({"familyName": family, "styleName": "Regular"})
    fb.setupOS2(sTypoAscender=880, sTypoDescender=-120, usWinAscent=880, usWinDescent=120)
    fb.setupPost()
    fb.save(str(path))
    return path


@pytest.fixture
def fresh_fonts(monkeypatch):
    """engine.plots as in a new process: no font looked up yet, matplotlib's settings put back after."""
    import matplotlib
    from matplotlib import font_manager

    import engine.plots as plots
    monkeypatch.setattr(plots, "_fonts", None)
    monkeypatch.setattr(plots, "_said_no_font", False)
    monkeypatch.setattr(font_manager.fontManager, "ttflist", list(font_manager.fontManager.ttflist))
    with matplotlib.rc_context():
        yield plots
    font_manager.fontManager._findfont_cached.cache_clear()


def _draw(plt, title, ticks, path):
    fig, ax = plt.subplots()
    ax.imshow([[0, 1], [1, 0]])
    ax.set_xticks(range(len(ticks)), ticks)
    ax.set_title(title)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig.savefig(path)
    plt.close(fig)
    return [str(w.message) for w in caught]


@pytest.mark.parametrize("font", [True, False], ids=["a CJK font", "no CJK font"])
def test_the_labels_use_the_cjk_font_or_never_a_glyph_it_lacks(fresh_fonts, tmp_path, monkeypatch, capsys, font):
    """With a CJK font (found by file, as one installed after matplotlib built its font list): the
    labels are Chinese and the tokens are drawn. Without one: English labels, tokens as ids, and a
    character no font has is escaped; never a box and a "Glyph missing" warning."""
    from qwen.lang import set_lang
    plots = fresh_fonts
    chars = "中文的法国首都是第层各头平均小检查点数值编造，：（）"
    files = (str(_make_font(tmp_path / "test-cjk.ttf", chars)),) if font else ()
    monkeypatch.setattr(plots, "CJK_FONTS", ())                     # nothing by name: only the file (or nothing)
    monkeypatch.setattr(plots, "CJK_KEYWORDS", ())
    monkeypatch.setattr(plots, "cjk_files", lambda: files)
    set_lang("zh")
    plt, lang = plots.pyplot()
    assert lang == ("zh" if font else "en")
    assert plots.fonts().cjk == (("Test CJK", files[0]) if font else None)
    ticks = plots.token_labels([11, 12, 13], ["法国", " the", "猫"])          # 猫: in no font here
    assert ticks == (["法国", " the", "#13"] if font else ["#11", " the", "#13"])
    title = plots.fonts().escape("第 3 层，各头平均（猫）")
    assert title == ("第 3 层，各头平均（\\u732b）" if font else
                     "\\u7b2c 3 \\u5c42\\uff0c\\u5404\\u5934\\u5e73\\u5747\\uff08\\u732b\\uff09")
    assert _draw(plt, title, ticks, tmp_path / "f.png") == []              # no glyph warning at all
    out = capsys.readouterr().out
    assert out.count("没有找到中文字体") == 1                                  # said once, for 猫 or the font


def test_qwen_plot_in_a_notebook_shows_the_figures_inline(tmp_path, monkeypatch, tiny_path):
    """A chapter run as a notebook (jupytext + a real kernel): QWEN_PLOT=1 turns the figures on
    (a notebook has no --plot), each one is shown inline (image/png) and written to QWEN_FIGURES."""
    jupytext = pytest.importorskip("jupytext")
    nbclient = pytest.importorskip("nbclient")
    for key, value in {"QWEN_TINY": "1", "QWEN_PLOT": "1", "QWEN_FIGURES": str(tmp_path / "figs"),
                       "QWEN_LANG": "en", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("MPLBACKEND", raising=False)                  # the kernel chooses (inline)
    nb = jupytext.read(ROOT / "ch03_norm.py")
    nbclient.NotebookClient(nb, timeout=90, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 2                                          # ch03's two figures, each once
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == ["ch03_final_norm.png", "ch03_layer_scales.png"]


def test_main_plot_runs_every_chapter_with_its_figures(tmp_path, tiny_path):
    """`python main.py --plot` (every chapter) runs them all, the chapters without figures too (they have
    no --plot option). Here "every chapter" is chapters 1 and 3: one without figures, one with."""
    code = ("import os, sys\n"
            f"sys.path.insert(0, {str(ROOT)!r})\n"
            "import main\n"
            "everything = main.chapters()\n"
            "main.chapters = lambda: {n: everything[n] for n in (1, 3)}\n"
            f"main.main(['--plot', '--tiny', '--out', {str(tmp_path / 'figs')!r}])\n"
            "print('AFTER', os.environ.get('QWEN_PLOT'), os.environ.get('QWEN_FIGURES'))\n")
    r = _run(code, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "# ch01_weights.py" in r.stdout and "# ch03_norm.py" in r.stdout and "Done: chapter(s) 1, 3" in r.stdout
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == ["ch03_final_norm.png", "ch03_layer_scales.png"]
    assert "AFTER None None" in r.stdout                             # the environment as it was


def test_plot_options_and_qwen_plot(tiny_path, monkeypatch):
    """--plot's default is QWEN_PLOT; the folder is --out, else QWEN_FIGURES, else out/figures."""
    import engine.cli as cli
    from engine.plots import figures_folder
    monkeypatch.setattr(cli, "_banner_shown", True)
    monkeypatch.delenv("QWEN_FIGURES", raising=False)
    monkeypatch.setenv("QWEN_PLOT", "1")
    ch = cli.chapter("c", "c", plot=True, argv=["--tiny"])
    assert ch.args.plot is True and figures_folder(ch.args.out).as_posix() == "out/figures"
    monkeypatch.setenv("QWEN_PLOT", "0")
    monkeypatch.setenv("QWEN_FIGURES", "/tmp/elsewhere")
    ch = cli.chapter("c", "c", plot=True, argv=["--tiny"])
    assert ch.args.plot is False and figures_folder(ch.args.out).as_posix() == "/tmp/elsewhere"
    ch = cli.chapter("c", "c", plot=True, argv=["--tiny", "--out", "mine"])
    assert figures_folder(ch.args.out).as_posix() == "mine"


def test_a_figures_folder_that_cannot_be_made_is_one_line(tmp_path):
    """QWEN_FIGURES (or --out) naming a file, or a place under one, is one line, not a 20-line
    FileExistsError traceback."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import engine.plots as plots
    from qwen.lang import QwenError
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    for out in (blocker, blocker / "under"):
        fig = plt.figure()
        with pytest.raises(QwenError) as e:
            plots.save(fig, "x.png", out=str(out))
        plt.close(fig)
        assert "Cannot write the figure" in e.value.en and "--out DIR or QWEN_FIGURES" in e.value.en
        assert "无法写出图片" in e.value.zh and "\n" not in e.value.en


# every image drawn with a colour map, whether a colour bar reads it; each panel's axis labels and limits
RECORD_HEATMAPS = r"""
import json, os
from matplotlib.figure import Figure
heatmaps = {}
_savefig = Figure.savefig
def savefig(fig, fname, *args, **kwargs):
    panels = []
    for ax in fig.axes:
        if getattr(ax, "_colorbar", None) is not None:
            continue                                            # a colour bar's own axes
        images = ax.get_images()
        panels.append({"title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
                       "xlim": [float(x) for x in ax.get_xlim()], "ylim": [float(y) for y in ax.get_ylim()],
                       "colour_mapped": [im.get_array().ndim == 2 for im in images],
                       "colour_bar": [im.colorbar is not None for im in images]})
    heatmaps[os.path.basename(str(fname))] = panels
    return _savefig(fig, fname, *args, **kwargs)
Figure.savefig = savefig
import runpy, sys
for script, *rest in (("ch06_attention.py",), ("ch08_model.py", "--no-reference"), ("ch10_vision.py",)):
    sys.argv = [os.path.join(ROOT, script), "--plot", "--tiny", "--out", OUT, *rest]
    runpy.run_path(sys.argv[0], run_name="__main__")
print("HEATMAPS " + json.dumps(heatmaps))
"""


def test_heatmaps_have_a_colour_bar_and_every_panel_its_axes_named(tmp_path, tiny_path):
    """ch06's, ch08's and ch10's heatmaps have a colour bar (without one a colour reads as no number),
    ch10's "24 x 24 patches" stands over axes counted in patches, not pixels, and ch10's other panels
    name their axes."""
    code = f"ROOT, OUT = {str(ROOT)!r}, {str(tmp_path / 'figs')!r}\n" + RECORD_HEATMAPS
    r = _run(code, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    figures = json.loads(r.stdout.split("HEATMAPS ", 1)[1].splitlines()[0])
    assert {"ch06_attention.png", "ch08_attention.png", "ch10_positions.png", "ch10_attention.png"} <= set(figures)
    for name in ("ch06_attention.png", "ch08_attention.png", "ch10_positions.png", "ch10_attention.png"):
        for panel in figures[name]:
            if not panel["colour_mapped"]:
                continue                                        # an unused cell of ch06's grid
            assert panel["xlabel"].strip() and panel["ylabel"].strip(), (name, panel)
            for mapped, bar in zip(panel["colour_mapped"], panel["colour_bar"]):
                assert bar or not mapped, (name, panel["title"])
    for name in ("ch10_positions.png", "ch10_attention.png"):
        picture = figures[name][0]                              # the picture, with its size in patches in a title
        sizes = [re.search(r"(\d+) x (\d+) patches", p["title"]) for p in figures["ch10_positions.png"]]
        rows, cols = (int(n) for n in next(s for s in sizes if s).groups())
        assert abs(picture["xlim"][1] - picture["xlim"][0]) == cols and abs(picture["ylim"][0] - picture["ylim"][1]) == rows
