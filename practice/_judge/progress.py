"""The learner's progress: one JSON file outside the code, never lost.

    $QWEN_PROGRESS, default $XDG_DATA_HOME/transformer-by-hand/progress.json
    {"204": {"status": "pass", "passed": true, "hints": 2, "graded_at": "...", "file_digest": "..."}, ...}

Every change is read-modify-write under a lock (progress.json.lock), written to a unique
temporary file beside it and renamed over it, so two judges at once both keep their result and
a crash never leaves half a file. A file that is not valid JSON or has the wrong shape is kept
as a backup beside it, reported in one line, and a fresh one is started. When the file cannot be
written (a folder, no permission), the judge says so in one line and goes on.
"""
import contextlib
import json
import os
import sys
import time
from pathlib import Path

from practice._judge import jsontext
from practice._judge.files import is_regular_or_absent, read_regular, write_atomic
from qwen.lang import T

STATUSES = ("new", "todo", "fail", "error", "pass")
LOCK_WAIT = 10.0                                   # seconds to wait for another judge's write
FIELDS = {"status": str, "passed": bool, "hints": int, "graded_at": str, "file_digest": str}


def path():
    base = os.environ.get("QWEN_PROGRESS")
    if base:
        try:
            return Path(base).expanduser()
        except RuntimeError:                                       # ~user that does not exist: the path as written
            return Path(base)
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data) / "transformer-by-hand" / "progress.json"


def _say(message):
    print(message, file=sys.stderr)


def _shape_problem(data):
    """None when `data` has the progress file's shape, else what is wrong (one phrase)."""
    if type(data) is not dict:
        return T("it holds a {t}, not an object", "它是 {t}，不是对象", t=type(data).__name__)
    for key, entry in data.items():
        if type(entry) is not dict:
            return T("entry {k} is not an object", "条目 {k} 不是对象", k=key)
        for field, value in entry.items():
            want = FIELDS.get(field)
            if want is not None and type(value) is not want:
                return T("{k}.{f} is not a {t}", "{k}.{f} 不是 {t}", k=key, f=field, t=want.__name__)
        if entry.get("status", "new") not in STATUSES:
            return T("{k} has an unknown status {s!r}", "{k} 的状态 {s!r} 未知", k=key, s=entry.get("status"))
        if entry.get("hints", 0) < 0:
            return T("{k}.hints is negative", "{k}.hints 是负数", k=key)
    return None


def _read(file, for_writing=False):
    """The progress dict; a broken file is backed up and reported, and {} returned. A file that cannot
    be read at all: {} for reading, OSError when about to write (it is never written over)."""
    try:
        raw = read_regular(file)
    except FileNotFoundError:
        return {}
    except OSError as e:
        if for_writing:
            raise
        _say(T("Progress: cannot read {f} ({e}); continuing without it.", "进度：无法读取 {f}（{e}）；先不使用它。",
               f=file, e=e.strerror or e))
        return {}
    try:
        data = json.loads(raw.decode("utf-8-sig"))                # a BOM (Notepad) is not damage
        problem = _shape_problem(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        data, problem = None, T("not valid JSON ({e})", "不是有效的 JSON（{e}）", e=str(e).splitlines()[0][:80])
    if problem is None:
        return data
    backup = file.with_name(f"{file.name}.broken-{time.strftime('%Y%m%d-%H%M%S')}")
    n = 1
    while backup.exists():
        backup, n = file.with_name(f"{file.name}.broken-{time.strftime('%Y%m%d-%H%M%S')}-{n}"), n + 1
    try:
        os.replace(file, backup)
        _say(T("Progress: {f} was unreadable ({p}); kept it as {b} and started a fresh one.",
               "进度：{f} 无法使用（{p}）；已备份为 {b}，并重新开始记录。", f=file, p=problem, b=backup.name))
    except OSError as e:
        _say(T("Progress: {f} is unreadable ({p}) and could not be backed up ({e}); continuing without it.",
               "进度：{f} 无法使用（{p}），也无法备份（{e}）；先不使用它。", f=file, p=problem, e=e.strerror or e))
    return {}


def load():
    return _read(path())


@contextlib.contextmanager
def _locked(file):
    """An exclusive lock on progress.json.lock: fcntl on POSIX, msvcrt on Windows."""
    lock = open(file.with_name(file.name + ".lock"), "a+b")
    try:
        try:
            import fcntl
            end = time.monotonic() + LOCK_WAIT
            while True:                                            # never forever: a stopped judge may hold it
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > end:
                        raise BlockingIOError(11, T("another judge has held its lock for {s:g} s (a stopped one? "
                                                    "Ctrl-Z?)", "另一个评测器占用它的锁已经 {s:g} 秒（是否被暂停了？Ctrl-Z？）",
                                                    s=LOCK_WAIT)) from None
                    time.sleep(0.05)
        except ImportError:
            import msvcrt
            lock.seek(0)
            msvcrt.locking(lock.fileno(), msvcrt.LK_LOCK, 1)      # retries for about 10 s
        yield
    finally:
        lock.close()                                               # closing releases the lock


def update(change):
    """Re-read the file under the lock, apply change(progress) (it edits the dict), write it back
    atomically. Returns the new dict; on a file that cannot be written, one line and the dict."""
    file = path()
    try:
        if file.is_dir():
            raise IsADirectoryError(21, T("it is a folder", "它是一个文件夹"))
        if not is_regular_or_absent(file):                         # a device or a pipe is never replaced
            raise OSError(22, T("not a regular file (a device or a pipe?)", "不是普通文件（设备或管道？）"))
        file.parent.mkdir(parents=True, exist_ok=True)
        with _locked(file):
            progress = _read(file, for_writing=True)
            change(progress)
            write_atomic(file, jsontext.dumps(progress, indent=1, ensure_ascii=False).encode("utf-8"))
        return progress
    except OSError as e:
        _say(T("Progress: could not save to {f} ({e}); set QWEN_PROGRESS to a file you can write.",
               "进度：无法保存到 {f}（{e}）；请把 QWEN_PROGRESS 设为一个可写的文件。", f=file, e=e.strerror or e))
        progress = {}
        change(progress)
        return progress
