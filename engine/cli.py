"""What every chapter script shares: one call to start it, section titles, printed claims, errors.

    ch = chapter("Chapter 4: RoPE", "第 4 章：旋转位置编码", plot=True)
    section(1, "What RoPE does", "RoPE 做了什么")
    say("  one claim {x:.3f}", "  一个结论 {x:.3f}", x=value)

`chapter()` parses the options (--model --tiny --lang --debug, and --plot --out when asked),
sets the language, finds the checkpoint, prints the tiny-checkpoint banner (once per run), and
returns an object with `args`, `path`, `cfg`, `W` (lazy weights), `tiny`, `tokenizer`, and
`threads` (the thread count it set for the chapter, and why: engine/threads.py).
Notebook users choose without flags: QWEN_TINY=1, QWEN_LANG=zh, QWEN_MODEL=/path, QWEN_PLOT=1, QWEN_MINE=1,
and a chapter's own options as QWEN_<OPTION> (--image -> QWEN_IMAGE, --max-new-tokens -> QWEN_MAX_NEW_TOKENS;
the command line wins). Unknown options (Jupyter's `-f kernel.json`) are ignored inside a notebook.

A learner's mistake (a wrong path, a broken download) is printed as one line in their
language; the full traceback only with --debug.
"""
import argparse
import functools
import os
import signal
import sys
import warnings
from pathlib import Path

from qwen.lang import LANGS, QwenError, get_lang, set_lang, tr

_debug = False
CHAPTER_REPLY_TOKENS = 64      # ch09's longest reply, run alone or by main.py (a cap: a reply that ends sooner stops)


def _peek_lang(argv):
    """--lang has to be known before the help texts are built."""
    for i, arg in enumerate(argv):
        if arg == "--lang" and i + 1 < len(argv):
            return argv[i + 1] if argv[i + 1] in LANGS else None
        if arg.startswith("--lang="):
            return arg.split("=", 1)[1] if arg.split("=", 1)[1] in LANGS else None
    return None


class _Parser(argparse.ArgumentParser):
    """argparse, with its own words ("usage:", "error:", "argument --x: expected one argument") in
    the learner's language."""

    _ZH = ((r"argument (\S+): expected one argument", r"参数 \1 需要一个值"),
           (r"argument (\S+): invalid choice: (.*) \(choose from (.*)\)", r"参数 \1 的值 \2 无效（可选：\3）"),
           (r"the following arguments are required: (.*)", r"缺少参数：\1"),
           (r"argument (\S+): (.*)", r"参数 \1：\2"))

    def format_usage(self):
        return tr("usage: ", "用法：") + super().format_usage().split("usage: ", 1)[-1]

    def format_help(self):
        text = tr("usage: ", "用法：") + super().format_help().split("usage: ", 1)[-1]
        if get_lang() == "zh":                                     # argparse ends each section's title
            for group in self._action_groups:                      # with an ASCII colon: "选项:"
                text = text.replace(f"\n{group.title}:\n", f"\n{group.title}：\n")
        return text

    def error(self, message):
        import re
        if get_lang() == "zh":
            for pattern, zh in self._ZH:
                message, n = re.subn("^" + pattern + "$", zh, message)
                if n:
                    break
        self.print_usage(sys.stderr)
        self.exit(2, tr("{prog}: error: {m}\n", "{prog}：错误：{m}\n", prog=self.prog, m=message))


def parser(description_en, description_zh, model_options=True):
    """An ArgumentParser with the options every script has: --lang, --debug (and --model, --tiny)."""
    set_lang(_peek_lang(sys.argv[1:]))                            # so that --help is in that language
    p = _Parser(description=tr(description_en, description_zh), add_help=False)
    p._positionals.title = tr("positional arguments", "位置参数")
    p._optionals.title = tr("options", "选项")
    p.add_argument("-h", "--help", action="help", help=tr("show this help and exit", "显示本帮助并退出"))
    if model_options:
        p.add_argument("--model", metavar="PATH",
                       help=tr("model folder or Hub repo id (default: $QWEN_MODEL, the HF cache, "
                              "then download Qwen/Qwen3.5-0.8B)",
                              "模型文件夹或 Hub 仓库名（默认：$QWEN_MODEL、HF 缓存，再下载 Qwen/Qwen3.5-0.8B）"))
        p.add_argument("--tiny", action="store_true",
                       help=tr("use the built-in tiny checkpoint (real format, made-up numbers; or QWEN_TINY=1)",
                              "使用内置的小检查点（真实格式，数值是编造的；也可设 QWEN_TINY=1）"))
    p.add_argument("--lang", choices=LANGS, help=tr("language of the output (default: $QWEN_LANG, else the locale)",
                                                   "输出语言（默认：$QWEN_LANG，否则跟随系统区域设置）"))
    p.add_argument("--debug", action="store_true",
                   help=tr("show full tracebacks", "出错时显示完整的调用栈"))
    return p


def _kernel_args(unknown):
    """True if these are only the arguments a Jupyter kernel is started with (-f kernel.json, --f=...,
    traitlets settings such as --HistoryManager.hist_file=:memory:): a notebook's sys.argv, which a chapter
    run in it reads, holds them and nothing the learner typed."""
    import re
    rest = list(unknown)
    while rest:
        a = rest.pop(0)
        if a == "-f" and rest:
            rest.pop(0)
        elif not (a.startswith(("--f=", "-f=")) or re.match(r"--[A-Za-z_]\w*(\.\w+)+=", a)):
            return False
    return True


def setup(p, argv=None, rest=False):
    """Parse the options, set the language, and make learner errors print as one line.
    rest=True: options this parser does not know are kept in args.rest (main.py hands them to a chapter)."""
    global _debug
    argv = sys.argv[1:] if argv is None else argv
    set_lang(_peek_lang(argv))
    args, unknown = p.parse_known_args(argv)
    if rest:
        args.rest = unknown
    elif unknown and not ("ipykernel" in sys.modules and _kernel_args(unknown)):   # a notebook: -f kernel.json
        p.error(tr("unrecognized arguments: {a}", "无法识别的参数：{a}", a=" ".join(unknown)))
    set_lang(args.lang)
    _debug = args.debug
    sys.excepthook = _excepthook
    if hasattr(signal, "SIGPIPE") and "ipykernel" not in sys.modules:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)            # `... | head` ends quietly
    return args


def speculative_option(value):
    """--speculative K as typed (a string, or None when not given) -> K, an int, or None (off).

    Checked here, where the option's name is known, before any weights are read: "--speculative x"
    is one line that names the option, not a ValueError from int() after the model has loaded.
    The range is qwen/mtp.py's (MAX_DRAFTS)."""
    if value is None:
        return None
    from qwen.mtp import MAX_DRAFTS
    text = str(value).strip()
    if not (text.isdigit() and 1 <= int(text) <= MAX_DRAFTS):
        raise QwenError("--speculative {v}: give how many tokens the MTP head drafts per step, a whole number from 1 "
                        "to {top} (3 is a good start), or leave the option out.",
                        "--speculative {v}：请给出 MTP 头每步起草的词元数，1 到 {top} 之间的整数（可以从 3 开始），"
                        "或者不加这个选项。", v=value, top=MAX_DRAFTS)
    return int(text)


def report(exc):
    """Print a learner error as one line (the traceback only with --debug)."""
    text = getattr(exc, get_lang(), None) if hasattr(exc, "en") and hasattr(exc, "zh") else None
    text = text or str(exc)
    print(tr("Error: ", "错误：") + text, file=sys.stderr)
    if "\n" not in text:                                         # a message with its own "Next:" line is enough
        print(tr("(run again with --debug to see the full traceback)", "（加 --debug 重新运行可看到完整调用栈）"),
              file=sys.stderr)


def _excepthook(kind, exc, tb):
    bilingual = isinstance(exc, QwenError) or hasattr(exc, "en") and hasattr(exc, "zh")   # e.g. qwen.norm.ShapeError
    if bilingual and not _debug:
        report(exc)
    elif issubclass(kind, KeyboardInterrupt) and not _debug:
        print(tr("\nStopped.", "\n已停止。"), file=sys.stderr)
    else:
        sys.__excepthook__(kind, exc, tb)


def model_path(args, quiet=False):
    """The checkpoint to use: --tiny or $QWEN_TINY, --model, $QWEN_MODEL, the cache or a download, else tiny."""
    global _fallback_said
    from engine.tiny import tiny_model_path
    from engine.hub import DEFAULT_REPO, ModelNotFound, find_model
    if args.tiny or _env_flag("QWEN_TINY"):
        return tiny_model_path()
    name = args.model or os.environ.get("QWEN_MODEL")
    if name and not os.path.exists(os.path.expanduser(name)) and not _repo_id(name):
        origin = tr("--model", "--model") if args.model else "$QWEN_MODEL"
        raise QwenError("{path} does not exist (from {origin}). Check the spelling, or leave it out to use the "
                        "downloaded model.", "{path} 不存在（来自 {origin}）。请检查拼写，或者不指定它，使用下载的模型。",
                        path=name, origin=origin)
    try:
        return find_model(args.model)
    except ModelNotFound as e:
        if name:
            raise not_found(name, download=False, error=e) from None    # asked for by name: no silent fallback
        if not quiet and not _fallback_said:                      # once per run: a notebook runs many chapters
            _fallback_said = True
            print(fallback_line(DEFAULT_REPO, e))
        return tiny_model_path()


_fallback_said = False                                           # model_path said why it uses the tiny checkpoint


def fallback_line(repo, error):
    """One line before the banner: why `repo` is not used (not cached, and offline or the download failed)
    and that the tiny checkpoint is. The banner under it says how to get the real model."""
    from huggingface_hub import constants
    from engine.hub import NO_NETWORK
    reason = getattr(error, "reason", "") or ""
    if _env_flag("HF_HUB_OFFLINE") or bool(getattr(constants, "HF_HUB_OFFLINE", False)):
        why_en, why_zh = "HF_HUB_OFFLINE is set", "设置了 HF_HUB_OFFLINE"
    elif reason.startswith(NO_NETWORK):
        why_en, why_zh = f"{constants.ENDPOINT} cannot be reached", f"连不上 {constants.ENDPOINT}"
    else:
        why_en, why_zh = f"{constants.ENDPOINT} failed ({reason})", f"访问 {constants.ENDPOINT} 出错（{reason}）"
    return tr("{repo} is not in the Hugging Face cache and {why}: using the built-in tiny checkpoint for now.",
              "Hugging Face 缓存里没有 {repo}，而且{why}：现在先用内置的小检查点。", repo=repo,
              why=why_en if get_lang() != "zh" else why_zh)


def _repo_id(value):
    import re
    return re.fullmatch(r"[\w.-]+/[\w.-]+", value) is not None and not value.startswith(".")


def not_found(repo, download, error=None):
    """The model is neither on disk nor downloadable now: one line, then one line of what to do.

    `error`: the loader's ModelNotFound, whose "(reason)" after the Hub's address is kept."""
    import re
    from huggingface_hub import constants
    from engine.hub import through_mirror
    from engine.hub import DEFAULT_REPO, ModelNotFound
    offline = _env_flag("HF_HUB_OFFLINE") or bool(getattr(constants, "HF_HUB_OFFLINE", False))
    get = "python main.py download" + ("" if repo == DEFAULT_REPO else f" --model {repo}")
    found = re.search(r"the Hub at \S+ \((.*)\)\.\n", getattr(error, "en", "") or "")
    reason = found[1] if found else "no connection"
    why_en = "HF_HUB_OFFLINE is set, so nothing was downloaded" if offline else f"{constants.ENDPOINT} failed ({reason})"
    why_zh = "设置了 HF_HUB_OFFLINE，所以没有下载" if offline else f"访问 {constants.ENDPOINT} 出错（{reason}）"
    if offline:
        next_en = "unset HF_HUB_OFFLINE" + ("" if download else f" and run {get}") + ", or use a folder you have: --model PATH (or --tiny)"
        next_zh = "取消 HF_HUB_OFFLINE" + ("" if download else f" 再运行 {get}") + "，或者用已有的文件夹：--model PATH（或 --tiny）"
    elif through_mirror():                                       # the mirror failed: no "use a mirror" again
        next_en = f"check the connection and the address in HF_ENDPOINT, then run {get}; or --model PATH (or --tiny)"
        next_zh = f"检查网络和 HF_ENDPOINT 里的地址，再运行 {get}；或者 --model PATH（或 --tiny）"
    else:
        next_en = f"check the connection, or use a mirror: HF_ENDPOINT=<mirror URL> {get}; or --model PATH (or --tiny)"
        next_zh = f"检查网络，或通过镜像：HF_ENDPOINT=<镜像地址> {get}；或者 --model PATH（或 --tiny）"
    cache = constants.HF_HUB_CACHE
    return ModelNotFound(f"Could not find {repo}: it is not in the Hugging Face cache ({cache}) and {why_en}.\n"
                         f"  Next: {next_en}",
                         f"找不到 {repo}：Hugging Face 缓存（{cache}）里没有，而且{why_zh}。\n  下一步：{next_zh}")


_banner_shown = False


def banner(cfg, again=False):
    """Say plainly, once per run (at the top), when the numbers are not Qwen3.5's."""
    global _banner_shown
    from engine.tiny import is_tiny

    if not is_tiny(cfg) or (_banner_shown and not again):
        return
    _banner_shown = True
    line = "=" * 78
    print(line)
    print(tr("  BUILT-IN TINY CHECKPOINT: real Qwen3.5 file format, MADE-UP numbers.\n"
            "  Shapes follow the real rules at a small size; the weights are made up.\n"
            "  Real: token ids (Qwen3.5's vocabulary), lines labelled Qwen3.5-0.8B.\n"
            "  For the real model: python main.py download",
            "  内置小检查点：文件格式与 Qwen3.5 完全一致，数值是编造的。\n"
            "  形状遵循真实规则、只是很小；权重是编造的。\n"
            "  真实的：词元编号（Qwen3.5 的词表）、标明 Qwen3.5-0.8B 的行。\n"
            "  想看真实模型：python main.py download"))
    print(line)


def size(nbytes):
    """1536 -> '1.5 KB', 1769980465 -> '1.77 GB' (powers of 1000, as file browsers and the Hub show sizes)."""
    for unit in ("B", "KB", "MB", "GB"):
        if abs(nbytes) < 1000 or unit == "GB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.2f} {unit}" if unit == "GB" else f"{nbytes:.1f} {unit}"
        nbytes /= 1000


def pad(text, width, right=False):
    """Justify for the terminal, where CJK characters take two columns (left, or right=True)."""
    import unicodedata
    text = str(text)
    fill = " " * max(0, width - sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text))
    return fill + text if right else text + fill


def count(n):
    """752393024 -> '752.4 M'."""
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.1f} M" if n >= 1e6 else f"{n:,}"


def _env_flag(name):
    from engine.hub import env_flag                   # one rule for QWEN_TINY=1 and the like (imported late: start-up)
    return env_flag(name)


def _quiet_notebook_progress():
    """Inside Jupyter, tqdm (imported by the Hub client) warns on import: without ipywidgets
    ("IProgress not found"), and with them ("Using `tqdm.autonotebook.tqdm` in notebook mode")."""
    warnings.filterwarnings("ignore", message="IProgress not found")
    warnings.filterwarnings("ignore", message="Using `tqdm.autonotebook.tqdm` in notebook mode")


_TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json", "config.json")
_tokenizers = {}                                   # (folder, its files' stat) -> Tokenizer: one load per process


def _tokenizer(path):
    """The tokenizer of the folder `path`, or None without tokenizer files. Loaded once per process
    while its files stay the same: main.py runs chapters 2, 8 and 9 in one process, and reading the
    248k-entry vocabulary and merges in each would cost about 2 s each on a 2-core machine. A file
    changed, added or removed (size, mtime or inode) loads it again."""
    from engine.tokens import load_tokenizer
    folder = Path(path).expanduser().resolve()
    stats = []
    for name in _TOKENIZER_FILES:
        try:
            st = (folder / name).stat()
            stats.append((name, st.st_size, st.st_mtime_ns, st.st_ino))
        except OSError:
            stats.append((name, None))
    if not any((folder / f).is_file() for f in _TOKENIZER_FILES[:3]):
        return None
    key = (str(folder), tuple(stats))
    if key not in _tokenizers:
        _tokenizers.clear()                           # one folder at a time: a changed file drops the old one
        _tokenizers[key] = load_tokenizer(path)
    return _tokenizers[key]


class Chapter:
    """What a chapter works on: its options, checkpoint folder, config and (lazy) weights."""

    def __init__(self, args, path, cfg):
        self.args, self.path, self.cfg = args, path, cfg
        from engine.tiny import is_tiny
        self.tiny = is_tiny(cfg)                       # True: the built-in tiny checkpoint, made-up numbers
        self.labelled = []                             # claims labelled as not shown to hold (unproven)

    @functools.cached_property
    def published_gaps(self):
        """[(figure, this checkpoint's value, the published one)] where this checkpoint differs from
        the published Qwen3.5-0.8B (engine/known.py; [] when it shows every figure the course knows)."""
        from engine.known import published_gaps
        from qwen.weights import UnknownTensor
        if self.tiny:
            return [("tiny", True, False)]
        try:
            return published_gaps(self.cfg, self.W)
        except UnknownTensor:                               # a checkpoint without those norms: not it
            return [("layers.0.input_layernorm.weight, norm.weight", tr("absent", "没有"), tr("present", "有"))]

    @property
    def published(self):
        """True when this checkpoint shows the published Qwen3.5-0.8B's figures: the only one on
        which what a chapter says about a trained model's behaviour is known to hold. A checkpoint
        in the real format with random weights has the real names and shapes, but not these values."""
        return not self.published_gaps

    def unproven(self, claim, en, zh, **fields):
        """After a line about trained behaviour (where a head looks, what a reply says, how often a
        draft is accepted): on the tiny checkpoint the chapter's own label (en, zh); on any other
        checkpoint not shown to be the published one, a label saying so, with the first figure that
        differs; nothing on the published one. `claim` names the line (kept in self.labelled)."""
        if self.published:
            return False
        self.labelled.append(claim)
        if self.tiny:
            say(en, zh, **fields)
            return True
        what, got, want = self.published_gaps[0]
        gap = f"{what}: {got:+.3f}, published {want:+.3f}" if isinstance(got, float) else f"{what}: {got}, published {want}"
        gap_zh = f"{what}：{got:+.3f}，发布版为 {want:+.3f}" if isinstance(got, float) else f"{what}：{got}，发布版为 {want}"
        say("  (not shown to be the published Qwen3.5-0.8B ({gap}):\n  what a trained model does holds only on that "
            "checkpoint; the line above is this checkpoint's number,\n  which random weights give by chance)",
            "  （不能确认是公开发布的 Qwen3.5-0.8B（{gap}）：\n  训练过的模型的行为只在那个检查点上成立；"
            "上面这一行只是这个检查点的数，随机权重也会碰巧给出）", gap=gap if get_lang() != "zh" else gap_zh)
        return True

    def figure_note(self):
        """A figure title's second line where trained behaviour is not shown to hold, else ''."""
        if self.published:
            return ""
        if self.tiny:
            return "\n" + self.label("tiny checkpoint: made-up numbers", "小检查点：数值是编造的")
        return "\n" + self.label("not shown to be the published checkpoint: maybe random weights",
                                  "不能确认是公开发布的检查点：权重可能是随机的")

    @functools.cached_property
    def W(self):
        """{short name: tensor}, read from disk only when a tensor is touched (the folder checked first)."""
        from engine.checkpoint import open_weights
        return open_weights(self.path)

    @functools.cached_property
    def tokenizer(self):
        """The checkpoint's tokenizer, or None when the folder has no tokenizer files."""
        return _tokenizer(self.path)

    @functools.cached_property
    def template(self):
        """The checkpoint's chat template (chat_template.jinja, else tokenizer_config.json's), or None."""
        from qwen.generate import ChatTemplate
        try:
            return ChatTemplate.load(self.path)
        except QwenError:
            return None

    def needs_chat(self, rest=False):
        """(tokenizer, chat template), or the chapter stops here (exit 0), said in one line, when the folder
        lacks either. rest=True: the chapter has already shown what needs neither."""
        if self.tokenizer is None or self.template is None:
            if rest:
                say("  (no tokenizer or chat template in this folder: the rest of this chapter needs both; it stops here)",
                    "  （这个文件夹里没有分词器或对话模板：本章余下的部分两者都需要，到此为止）")
            else:
                say("  (no tokenizer or chat template in this folder: this chapter needs both; it stops here)",
                    "  （这个文件夹里没有分词器或对话模板：本章两者都需要，到此为止）")
            raise SystemExit(0)
        return self.tokenizer, self.template

    def sentence(self, text):
        """(ids, readable names) of `text` through the checkpoint's tokenizer; without one (or with a
        vocabulary too small for Qwen3.5's ids), rows 0..10 of the embedding table stand in, said in
        one line."""
        tok = self.tokenizer
        if tok is not None and self.cfg.vocab_size >= 248044:
            ids = tok.encode(text)
            return ids, [tok.readable(i) for i in ids]
        ids = list(range(min(11, self.cfg.vocab_size)))
        say("  (no tokenizer for this checkpoint: rows 0..{n} of the embedding table stand in for the sentence)",
            "  （此检查点没有可用的分词器：用嵌入表的第 0..{n} 行代替句子）", n=len(ids) - 1)
        return ids, [f"#{i}" for i in ids]

    def pyplot(self):
        """matplotlib.pyplot ready to draw (engine.plots: Agg on the command line, Jupyter's backend in
        a notebook, a CJK font where the system has one), or None, said in one line, without matplotlib.

        Without a CJK font the figures' labels stay in English and one line says so."""
        from engine import plots
        plt, self.plot_lang = plots.pyplot()
        return plt

    def save(self, fig, name):
        """Write a figure into the figures folder (--out, $QWEN_FIGURES, else out/figures), say so in
        one line, and show it inline in a notebook."""
        from engine import plots
        return plots.save(fig, name, self.args.out)

    def label(self, en, zh, **fields):
        """Text for a figure: in the learner's language, or English when no CJK font was found; a
        character no font has (a token's in the text) is written as an escape, never as a box."""
        from engine import plots
        text = zh if getattr(self, "plot_lang", get_lang()) == "zh" else en
        return plots.fonts().escape(text.format(**fields) if fields else text)

    def ticks(self, ids, pieces):
        """Tick labels for tokens: each piece where the fonts can draw it, else its id ('#12345')."""
        from engine import plots
        return plots.token_labels(ids, pieces)


def env_name(flag):
    """The environment variable a chapter's option is also read from: --image -> QWEN_IMAGE,
    --max-new-tokens -> QWEN_MAX_NEW_TOKENS (a notebook has no command line)."""
    return "QWEN_" + flag.lstrip("-").upper().replace("-", "_")


def _from_env(flag, kwargs):
    """The option's default from QWEN_<OPTION> when that is set: converted and checked as the option
    itself would be, so a bad value is one line naming the variable. Returns (kwargs, error or None).
    The command line still wins: the variable only replaces the default."""
    name = env_name(flag)
    if name not in os.environ:
        return kwargs, None
    value = os.environ[name]
    if kwargs.get("action") == "store_true":
        return {**kwargs, "default": _env_flag(name)}, None        # 1, true, yes, on (as QWEN_TINY)
    try:
        got = kwargs.get("type", str)(value)
    except (TypeError, ValueError):
        got = None
    choices = kwargs.get("choices")
    if got is None or (choices and got not in choices):
        kind = tr("one of {c}", "以下之一：{c}", c=tr(", ", "、").join(map(str, choices))) if choices else \
            {int: tr("a whole number", "整数"), float: tr("a number", "数字")}.get(kwargs.get("type"), tr("text", "文字"))
        return kwargs, QwenError("{name}={value!r} is not a value {flag} takes ({kind}): change it, or unset it "
                                 "for the default.", "{name}={value!r} 不是 {flag} 能接受的值（{kind}）：请修改，"
                                 "或取消这个变量以使用默认值。", name=name, value=value, flag=flag, kind=kind)
    return {**kwargs, "default": got}, None


def _add_options(p, options):
    """options: {"--text": dict(default=..., help=(en, zh))}, or a function that takes the parser.
    Each option of the dict is also read from QWEN_<OPTION> (env_name). Returns the first bad such
    variable as a QwenError (raised by the caller once errors print as one line), or None."""
    if callable(options):
        options(p)
        return None
    error = None
    for flag, kwargs in (options or {}).items():
        kwargs, bad = _from_env(flag, dict(kwargs))
        error = error or bad
        if isinstance(kwargs.get("help"), tuple):
            default = kwargs.get("default")
            said = default in (None, False) or "default" in kwargs["help"][0]       # nothing to say, or said already
            shown = "" if said else tr("default {d}; ", "默认 {d}；", d=default)
            kwargs["help"] = tr(*kwargs["help"]) + tr(" ({d}or {e})", "（{d}也可设 {e}）", d=shown, e=env_name(flag))
        p.add_argument(flag, **kwargs)
    return error


def chapter(en, zh, plot=False, options=None, argv=None, mine=False, small=None):
    """Start a chapter: options, language, checkpoint, config, the banner. Returns a `Chapter`.
    mine=True: the chapter builds the model and takes --mine (your solved exercises in it: practice/mine.py).
    small: whether its work is too small for threads (None: as small as its checkpoint is, the tiny one)."""
    from engine import threads
    from qwen.config import Config

    _quiet_notebook_progress()
    p = parser(en, zh)
    if plot:
        p.add_argument("--plot", action="store_true", default=_env_flag("QWEN_PLOT"),
                       help=tr("also draw the figures, written as PNGs (or QWEN_PLOT=1; needs matplotlib: "
                               "pip install -e .[plot])",
                               "同时画图，写成 PNG（也可设 QWEN_PLOT=1；需要 matplotlib：pip install -e .[plot]）"))
        p.add_argument("--out", metavar="DIR", default=None,
                       help=tr("folder for the figures (default: $QWEN_FIGURES, else out/figures)",
                               "图片保存的文件夹（默认：$QWEN_FIGURES，否则 out/figures）"))
    p.add_argument("--code", action="store_true", default=_env_flag("QWEN_CODE"),
                   help=tr("print the source of the code this chapter teaches (a notebook always shows it; or QWEN_CODE=1)",
                           "打印本章所讲代码的源码（notebook 里总是显示；也可设 QWEN_CODE=1）"))
    if mine:
        p.add_argument("--mine", action="store_true", default=_env_flag("QWEN_MINE"),
                       help=tr("build the model with your solved exercises in place of the course's parts (or "
                               "QWEN_MINE=1; only the ones the judge passes)",
                               "用你解出的练习代替课程的部件来搭建模型（也可设 QWEN_MINE=1；只用评测通过的）"))
    bad_env = _add_options(p, options)
    args = setup(p, argv)
    if bad_env is not None:
        raise bad_env
    path = model_path(args)
    cfg = Config.load(path)
    banner(cfg)
    say("\n" + "=" * 78 + "\n{title}\n" + "=" * 78, "\n" + "=" * 78 + "\n{title}\n" + "=" * 78, title=tr(en, zh))
    ch = Chapter(args, path, cfg)
    ch.threads = threads.use(threads.choose(small=ch.tiny if small is None else small))   # engine/threads.py
    _fast_products()                                           # the engine's kernel behind qwen/linear.py
    return ch


_SPEED = []                                                     # the fast-products context, entered once


def _fast_products():
    """The chapter computes its products through engine/products.py's kernel (qwen/linear.py's seam),
    from here to the end of the process: the same numbers as F.linear, to fp32 rounding."""
    from engine import products
    if not _SPEED:
        context = products.fast()
        context.__enter__()
        _SPEED.append(context)


def show_code(ch, *objects):
    """The code this chapter teaches (functions, classes, or a whole module file), taken from its
    module with `inspect` (never a second copy that could drift): shown in a notebook, printed with --code, else one line of where it is (file:line).
    Returns [(name, file, line)], file relative to the repository, line the one its def/class is on."""
    import inspect
    root = Path(__file__).resolve().parents[1]
    shown, places = [], []
    for obj in objects:
        obj = inspect.unwrap(obj)                                  # generate_ids is wrapped by inference_mode
        lines, start = inspect.getsourcelines(obj)
        file = Path(inspect.getsourcefile(obj)).resolve()
        file = file.relative_to(root).as_posix() if file.is_relative_to(root) else str(file)
        if inspect.ismodule(obj):                                  # a whole lesson file, as the seed shows norm.py
            start, name = 1, obj.__name__
        else:
            start += next(i for i, line in enumerate(lines) if line.lstrip().startswith(("def ", "class ")))
            name = obj.__qualname__
        places.append((name, file, start))
        shown.append((f"# {file}:{start}  {name}", inspect.getsource(obj)))
    notebook = "ipykernel" in sys.modules
    if notebook or getattr(ch.args, "code", False):
        for title, source in shown:
            _print_code(title, source, notebook)
    else:
        say("  the code this chapter teaches: {w} (--code prints it)", "  本章所讲的代码：{w}（--code 打印出来）",
            w=tr(", ", "、").join(f"{name} {file}:{line}" for name, file, line in places))
    return places


def _print_code(title, source, notebook):
    import textwrap
    text = title + "\n" + textwrap.dedent(source)
    if notebook:
        try:
            from IPython.display import Code, display
            return display(Code(text, language="python"))
        except ImportError:
            pass
    print(text)


def section(n, en, zh):
    """A section title: a blank line, "n. title", a rule."""
    print(f"\n{n}. {tr(en, zh)}\n" + "-" * 78)


def say(en, zh, **fields):
    """Print one line (or a few) in the learner's language."""
    print(tr(en, zh, **fields))
