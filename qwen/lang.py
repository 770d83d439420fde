"""Learner-facing text in two languages, from one source.

Every sentence a learner reads is written once, as a pair next to the code that prints it:
`tr("English", "中文")`; `set_lang()` (from `--lang`, else $QWEN_LANG, else the locale) picks the half shown.

Errors a learner can cause (a missing folder, a broken file, a wrong shape) are raised as
`QwenError`, which carries both languages too; scripts print it in one line, without a
traceback, unless `--debug` is given (see `engine.cli`).
"""
import contextlib
import locale
import os
import threading

LANGS = ("en", "zh")
_lang = None
_here = threading.local()      # one thread's own choice (each request of the practice page), over _lang


def detect_lang():
    """zh when the environment's locale is Chinese, else en."""
    for var in ("QWEN_LANG", "LC_ALL", "LC_MESSAGES", "LANG", "LANGUAGE"):
        value = os.environ.get(var, "")
        if value:
            return "zh" if value.lower().startswith("zh") else "en"
    with contextlib.suppress(ValueError):
        return "zh" if (locale.getlocale()[0] or "").lower().startswith("zh") else "en"
    return "en"


def set_lang(lang=None):
    """Choose the language for everything printed from now on (None: from the locale)."""
    global _lang
    lang = lang or detect_lang()
    if lang not in LANGS:
        raise ValueError(f"unknown language {lang!r}: use one of {', '.join(LANGS)}")
    _lang = lang
    return lang


def get_lang():
    return getattr(_here, "lang", None) or _lang or set_lang()             # this thread's, else the process's


@contextlib.contextmanager
def speaking(lang):
    """Within the block, this thread speaks `lang`, no other: the practice page answers each request in its language."""
    if lang not in LANGS:
        raise ValueError(f"unknown language {lang!r}: use one of {', '.join(LANGS)}")
    before, _here.lang = getattr(_here, "lang", None), lang
    try:
        yield lang
    finally:
        _here.lang = before


def tr(en, zh, **fields):
    """The learner's half of an (English, Chinese) pair, with {fields} filled in.

    In Chinese a True / False field reads 是 / 否 (English keeps True / False)."""
    if get_lang() != "zh":
        return en.format(**fields) if fields else en
    fields = {k: ("是" if v else "否") if isinstance(v, bool) else v for k, v in fields.items()}
    return zh.format(**fields) if fields else zh


T = tr      # the short name the judge uses


class QwenError(Exception):
    """A problem the learner can fix; the message says what and how, in both languages."""

    def __init__(self, en, zh, **fields):
        self.en = en.format(**fields) if fields else en
        self.zh = zh.format(**fields) if fields else zh
        super().__init__(self.en)

    def __str__(self):
        return self.zh if get_lang() == "zh" else self.en
