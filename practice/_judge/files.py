"""Reading a file the learner named (their solution, the progress file): regular files only; and
writing one whole or not at all.

A named pipe would block the judge forever and a symlink to /dev/zero would fill its memory, so
the file is opened without blocking and refused unless it is a regular file.
"""
import contextlib
import errno
import os
import stat
import tempfile

from qwen.lang import T


MAX_BYTES = 64 << 20                               # a solution is a few KB; 64 MB is clearly not one


def read_regular(path, limit=None):
    """The bytes of the regular file at `path`. OSError (with a one-phrase strerror) for anything else,
    and for a file over `limit` bytes (the judge's own memory has no limit)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, T("it is a folder", "它是一个文件夹"), str(path))
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, T("not a regular file (a device or a pipe?)", "不是普通文件（设备或管道？）"), str(path))
        limit = MAX_BYTES if limit is None else limit
        data = f.read(limit + 1)
        if len(data) > limit:
            raise OSError(errno.EFBIG, T("the file is larger than {mb} MB: is it the right file?", "文件大于 {mb} MB：是不是选错了文件？",
                                         mb=limit >> 20), str(path))
        return data


def is_regular_or_absent(path):
    """True when `path` is a regular file or does not exist: what may be written over."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return True
    except OSError:
        return False


def write_atomic(path, data):
    """Write bytes to a temporary file beside `path`, fsync, rename over it: never half a file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
