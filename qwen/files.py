"""Opening a checkpoint's files: one place for everything a path can be instead of a readable file.

A folder can hold a symbolic link that loops or points nowhere, a folder where a file should be, a
file without read permission, or a FIFO, which blocks forever when opened the usual way. `open_file`
opens without blocking and checks what it opened before reading; `read_json` adds a size limit and
JSON's failure modes (bad UTF-8, bad syntax, deep nesting). `folder_to_write` checks a folder before
anything is written into it. Each failure is one `QwenError` line that names the path and says what to do.
"""
import errno
import json
import os
import stat
import sys
from pathlib import Path

from qwen.lang import QwenError

# Qwen3.5's largest JSON file, tokenizer.json, is 12.8 MB; parsing JSON takes over 15 bytes of memory per byte.
MAX_JSON_BYTES = 32_000_000
INDEX_NAME = "model.safetensors.index.json"


def open_file(path):
    """`path` opened for binary reading, after checking that it is a regular file."""
    path = Path(path)
    try:                                                   # O_NONBLOCK: a FIFO opens without a writer
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise path_error(path, e) from None
    if (kind := stat.S_IFMT(os.fstat(fd).st_mode)) != stat.S_IFREG:
        os.close(fd)
        raise not_a_file(path, kind)
    if hasattr(os, "O_NONBLOCK"):
        os.set_blocking(fd, True)                          # back to ordinary reads
    return os.fdopen(fd, "rb")


def read_json(file, limit=MAX_JSON_BYTES):
    """A JSON file of the checkpoint (config, index, tokenizer files), or a one-line message."""
    return parse_json(read_small(file, limit), file)


def read_small(file, limit=MAX_JSON_BYTES):
    """The bytes of a small file of the checkpoint (JSON, merges.txt), refused when over `limit`:
    by its size before reading, and by what was read (a /proc file says it has 0 bytes)."""
    with open_file(file) as f:
        size = os.fstat(f.fileno()).st_size
        raw = f.read(limit + 1) if size <= limit else b""
    if size > limit or len(raw) > limit:
        raise QwenError("{file} is {size:,} bytes; a checkpoint's JSON files and merges.txt are far smaller (at most "
                        "{limit:,}). It is not the file it should be: download it again.", "{file} 有 {size:,} 字节；检查点的"
                        " JSON 文件和 merges.txt 要小得多（最多 {limit:,}）。它不是应有的文件：请重新下载。", file=file,
                        size=max(size, len(raw)), limit=limit)
    return raw


def parse_json(raw, file):
    """JSON from bytes that must be UTF-8; `file` is named in the message when they are not JSON."""
    try:
        return json.loads(raw.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        why = str(e).splitlines()[0]
    except ValueError:                                     # Python's int limit: a number of over 4,300 digits
        why = "a number with more than {n:,} digits".format(n=sys.get_int_max_str_digits())
    except RecursionError:                                 # [[[[...]]]]: json recurses per level
        why = "nested too deeply"
    raise QwenError("{file} is not valid JSON ({why}). Download it again.", "{file} 不是合法的 JSON（{why}）。请重新下载。",
                    file=file, why=why)


def kind_of(path):
    """'file', 'folder' or None (nothing there); a message for a path that cannot be looked at."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR) and not os.path.islink(path):
            return None
        raise path_error(Path(path), e) from None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return "file" if stat.S_ISREG(mode) else "folder"
    raise not_a_file(Path(path), stat.S_IFMT(mode))


def list_folder(folder):
    """The names in a folder, sorted."""
    try:
        return sorted(os.listdir(folder))
    except OSError as e:
        raise path_error(Path(folder), e) from None


def folder_to_write(folder, names=(), origin=None):
    """`folder` as a Path, checked before anything is written: it and each parent is a folder or not there
    yet (mkdir makes it), and none of `names` in it is a folder (a file there is replaced)."""
    folder = Path(folder)
    at, at_zh = ("", "") if origin is None else (f"{origin}: ", f"{origin}：")     # the option it came from
    for path in (folder, *folder.parents):
        if (kind := kind_of(path)) == "file":
            raise QwenError("{at}Cannot write into {folder}: {path} is a file, not a folder. Give another folder, "
                            "or move the file.", "{at_zh}无法写入 {folder}：{path} 是文件，不是文件夹。请换一个文件夹，或移走"
                            "这个文件。", folder=folder, at=at, at_zh=at_zh, path=path)
        if kind == "folder":
            break
    for name in names:
        if kind_of(folder / name) == "folder":
            raise QwenError("{at}Cannot write {path}: it is a folder. Give another folder, or move it.",
                            "{at_zh}无法写入 {path}：它是一个文件夹。请换一个文件夹，或把它移走。", path=folder / name,
                            at=at, at_zh=at_zh)
    return folder


# ---------------------------------------------------------------------------- the messages
def path_error(path, e):
    """An OSError from opening or listing `path`, as one line that says what to do."""
    if isinstance(e, PermissionError):
        while path.parent != path and not os.access(path.parent, os.R_OK | os.X_OK):
            path = path.parent                             # name the folder that cannot be entered
        return QwenError("Permission denied: {path} cannot be read by this user. Check its permissions (ls -l), or make "
                         "it readable (chmod a+r; folders also a+x).", "没有权限：当前用户无法读取 {path}。请检查权限（ls -l），"
                         "或让它可读（chmod a+r；文件夹还要 a+x）。", path=path)
    if e.errno == errno.ELOOP:
        return QwenError("{path} is a symbolic link that loops back on itself. Replace it with the real file.",
                         "{path} 是一个绕回自身的符号链接（循环）。请换成真正的文件。", path=path)
    if e.errno == errno.ENOENT and os.path.islink(path):
        return QwenError("{path} is a symbolic link to {target}, which does not exist. Fix the link or download the model "
                         "again.", "{path} 是指向 {target} 的符号链接，但目标不存在。请修好链接或重新下载模型。", path=path,
                         target=os.readlink(path))
    if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.EISDIR):
        return not_a_file(path, stat.S_IFDIR) if e.errno == errno.EISDIR else missing_path(path)
    return QwenError("{path} cannot be read ({why}).", "无法读取 {path}（{why}）。", path=path, why=e.strerror or type(e).__name__)


def not_a_file(path, kind):
    if kind == stat.S_IFDIR:
        return QwenError("{path} is a folder, where a file was expected. Point at the model folder that holds "
                         "config.json and the .safetensors files.", "{path} 是一个文件夹，这里需要的是文件。请指向包含 "
                         "config.json 和 .safetensors 文件的模型文件夹。", path=path)
    return QwenError("{path} is not a regular file (a FIFO, socket or device): reading it could wait forever. Replace "
                     "it with the real file.", "{path} 不是普通文件（而是 FIFO、套接字或设备）：读取它可能永远等待。"
                     "请换成真正的文件。", path=path)


def missing_path(path, origin="path"):
    return QwenError("{path} does not exist ({origin}). Check the spelling, or leave it out to use the downloaded model.",
                     "{path} 不存在（来自 {origin}）。请检查拼写，或者不指定它，使用下载的模型。", path=path, origin=origin)


def weight_files(folder):
    """The .safetensors files of a checkpoint folder: the index's shards, else model.safetensors, else all
    (engine/checkpoint.py names what is wrong with an index, a missing shard or pickle-only weights)."""
    folder = Path(folder)
    if kind_of(folder / INDEX_NAME) == "file":
        return [folder / n for n in sorted(set(read_json(folder / INDEX_NAME)["weight_map"].values()))]
    names = list_folder(folder)
    names = ["model.safetensors"] if "model.safetensors" in names else [n for n in names if n.endswith(".safetensors")]
    if not names:
        raise QwenError("{folder} has no .safetensors weights. Download the model (python main.py download) or "
                        "pass the folder that holds them.", "{folder} 里没有 .safetensors 权重。请下载模型"
                        "（python main.py download），或给出存放权重的文件夹。", folder=folder)
    return [folder / n for n in names]
