"""What every chapter script shares: its options, finding the model, and clean error messages.

A learner's mistake (a wrong path, a broken download) is printed as one line in their
language; the full traceback only with --debug. Scripts call `setup()` first thing, so this
also works when a chapter is run cell by cell as a notebook (unknown options such as
Jupyter's `-f kernel.json` are ignored there).
"""
import argparse
import os
import signal
import sys

from qwen.lang import LANGS, QwenError, T, set_lang

_debug = False


def _peek_lang(argv):
    """--lang has to be known before the help texts are built."""
    for i, arg in enumerate(argv):
        if arg == "--lang" and i + 1 < len(argv):
            return argv[i + 1] if argv[i + 1] in LANGS else None
        if arg.startswith("--lang="):
            return arg.split("=", 1)[1] if arg.split("=", 1)[1] in LANGS else None
    return None


def parser(description_en, description_zh, model_options=True):
    """An ArgumentParser with the options every script has: --lang, --debug (and --model, --tiny)."""
    set_lang(_peek_lang(sys.argv[1:]))                            # so that --help is in that language
    p = argparse.ArgumentParser(description=T(description_en, description_zh))
    if model_options:
        p.add_argument("--model", metavar="PATH",
                       help=T("model folder or Hub repo id (default: $QWEN_MODEL, the HF cache, "
                              "then download Qwen/Qwen3.5-0.8B)",
                              "模型文件夹或 Hub 仓库名（默认：$QWEN_MODEL、HF 缓存，再下载 Qwen/Qwen3.5-0.8B）"))
        p.add_argument("--tiny", action="store_true",
                       help=T("use the built-in tiny checkpoint (real format, made-up numbers)",
                              "使用内置的小检查点（真实格式，数值是编造的）"))
    p.add_argument("--lang", choices=LANGS, help=T("language of the output (default: from the locale)",
                                                   "输出语言（默认跟随系统区域设置）"))
    p.add_argument("--debug", action="store_true",
                   help=T("show full tracebacks", "出错时显示完整的调用栈"))
    return p


def setup(p, argv=None):
    """Parse the options, set the language, and make learner errors print as one line."""
    global _debug
    argv = sys.argv[1:] if argv is None else argv
    set_lang(_peek_lang(argv))
    args, unknown = p.parse_known_args(argv)
    if unknown and "ipykernel" not in sys.modules:               # a notebook passes -f kernel.json
        p.error(T("unrecognized arguments: {a}", "无法识别的参数：{a}", a=" ".join(unknown)))
    set_lang(args.lang)
    _debug = args.debug
    sys.excepthook = _excepthook
    if hasattr(signal, "SIGPIPE") and "ipykernel" not in sys.modules:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)            # `... | head` ends quietly
    return args


def report(exc):
    """Print a learner error as one line (the traceback only with --debug)."""
    print(T("Error: ", "错误：") + str(exc), file=sys.stderr)
    print(T("(run again with --debug to see the full traceback)", "（加 --debug 重新运行可看到完整调用栈）"),
          file=sys.stderr)


def _excepthook(kind, exc, tb):
    if issubclass(kind, QwenError) and not _debug:
        report(exc)
    elif issubclass(kind, KeyboardInterrupt) and not _debug:
        print(T("\nStopped.", "\n已停止。"), file=sys.stderr)
    else:
        sys.__excepthook__(kind, exc, tb)


def model_path(args, quiet=False):
    """The checkpoint to use: --tiny, --model, $QWEN_MODEL, the cache or a download, else tiny."""
    from qwen.tiny import tiny_model_path
    from qwen.weights import ModelNotFound, find_model

    if args.tiny:
        return tiny_model_path()
    if args.model or os.environ.get("QWEN_MODEL"):
        return find_model(args.model)                     # asked for by name: no silent fallback
    try:
        return find_model()
    except ModelNotFound as e:
        if not quiet:
            print(str(e) + "\n")
        return tiny_model_path()


def banner(cfg):
    """Say plainly, at the top of every output, when the numbers are not Qwen3.5's."""
    from qwen.tiny import is_tiny

    if not is_tiny(cfg):
        return
    line = "=" * 78
    print(line)
    print(T("  BUILT-IN TINY CHECKPOINT: real Qwen3.5 file format, MADE-UP numbers.\n"
            "  Shapes follow the real rules at a small size; no value below is Qwen3.5's.\n"
            "  For the real model: python main.py download",
            "  内置小检查点：文件格式与 Qwen3.5 完全一致，数值是编造的。\n"
            "  形状遵循真实规则、只是很小；下面没有一个数是 Qwen3.5 的。\n"
            "  想看真实模型：python main.py download"))
    print(line)


def size(nbytes):
    """1536 -> '1.5 KB' (powers of 1000, as file browsers and the Hub show sizes)."""
    for unit in ("B", "KB", "MB", "GB"):
        if abs(nbytes) < 1000 or unit == "GB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1000


def pad(text, width):
    """Left-justify for the terminal, where CJK characters take two columns."""
    import unicodedata
    used = sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)
    return text + " " * max(0, width - used)


def count(n):
    """752393024 -> '752.4 M'."""
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.1f} M" if n >= 1e6 else f"{n:,}"
