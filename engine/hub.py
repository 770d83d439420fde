"""Where the checkpoint is: a folder given by the learner, $QWEN_MODEL, the Hugging Face cache,
or a download of the files the course uses.

    path = find_model()              # a folder: given, $QWEN_MODEL, HF cache, or download (QWEN_TINY=1: tiny)
"""
import os
import re
import sys
from pathlib import Path

from qwen.config import Config
from qwen.files import INDEX_NAME, kind_of, missing_path
from qwen.lang import QwenError, T

DEFAULT_REPO = "Qwen/Qwen3.5-0.8B"
# What the course reads from the Hub: the weights, the tokenizer, the chat template and the image
# preprocessor's settings (chapters 10-11); the video preprocessor, README and LICENSE stay behind.
COURSE_FILES = ["config.json", INDEX_NAME, "*.safetensors", "tokenizer.json", "tokenizer_config.json",
                "vocab.json", "merges.txt", "chat_template.jinja", "preprocessor_config.json"]


class ModelNotFound(QwenError):
    """No checkpoint on disk and none could be downloaded."""


def find_model(name_or_path=None, *, download=True):
    """The folder of a Qwen3.5 checkpoint.

    Looks, in order: the argument (a folder, or a Hub repo id), $QWEN_MODEL, the Hugging Face
    cache (no network), then downloads the files the course uses (resumable, with progress
    bars; honours HF_ENDPOINT, HF_HOME and HF_HUB_OFFLINE). Default repo: Qwen/Qwen3.5-0.8B.
    Without an argument and with QWEN_TINY=1 (as the chapters read it, e.g. set in a notebook's
    first cell), the built-in tiny checkpoint: the README's code then runs without the real model.
    """
    if name_or_path is None and env_flag("QWEN_TINY"):
        from engine.tiny import tiny_model_path
        return tiny_model_path()
    for value, origin in ((name_or_path, "argument"), (os.environ.get("QWEN_MODEL"), "QWEN_MODEL")):
        if value:
            value = str(value)
            path = Path(value).expanduser()
            if kind_of(path) is not None:                   # a loop or no permission: said here
                return _model_folder(path)
            if not _looks_like_repo_id(value):
                raise missing_path(path, origin)
            return _from_hub(value, download)
    return _from_hub(DEFAULT_REPO, download)


def _looks_like_repo_id(value):
    return re.fullmatch(r"[\w.-]+/[\w.-]+", value) is not None and not value.startswith(".")


def _model_folder(path):
    folder = path if kind_of(path) == "folder" else path.parent
    if kind_of(folder / "config.json") != "file" and folder is not path:   # a file given: name it, not "."
        raise QwenError("{file} is a file, and its folder has no config.json. Pass the model folder, the one "
                        "that holds config.json and the .safetensors files (--model PATH or QWEN_MODEL).",
                        "{file} 是一个文件，它所在的文件夹里没有 config.json。请给出模型文件夹，即包含 config.json 和 "
                        ".safetensors 文件的那个（--model PATH 或 QWEN_MODEL）。", file=path)
    if kind_of(folder / "config.json") != "file":
        Config.load(folder)                                # raises the "no config.json" message
    return folder


def _hub_offline():
    from huggingface_hub import constants
    env = env_flag("HF_HUB_OFFLINE")
    return env or bool(constants.HF_HUB_OFFLINE)


def _complete(folder):
    """A cached snapshot is usable when config.json and every weights file are there (an
    interrupted download leaves some out; downloading again resumes it)."""
    from engine.checkpoint import check_files              # here: `main.py download` starts without torch
    try:
        check_files(folder)                                # raises when a shard of the index is missing
        return kind_of(Path(folder) / "config.json") == "file"
    except QwenError:
        return False


def env_flag(name):
    """An environment variable set to a true value (1, true, yes, on), as QWEN_TINY=1."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def through_mirror():
    """True when HF_ENDPOINT points somewhere else than the Hub: a failure there needs no "use a mirror"."""
    from huggingface_hub import constants
    default = getattr(constants, "_HF_DEFAULT_ENDPOINT", "https://huggingface.co")
    return constants.ENDPOINT.rstrip("/") != default.rstrip("/")


NO_NETWORK = "no network"         # how a reason for not downloading starts when the Hub's host cannot be reached


def _unreachable(endpoint, timeout=3.0):
    """Why the Hub's host cannot be reached ("no network: ..."), or None when a connection opens.

    One name lookup and one TCP connection, before the download is tried: without a network the
    Hub client's own attempt prints a line, retries, and takes longer to fail than this. Behind a
    proxy (HTTPS_PROXY and the like) the host is not reached directly, so the client decides."""
    import socket
    from urllib.parse import urlsplit
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")):
        return None
    url = urlsplit(endpoint)
    host, port = url.hostname, url.port or (80 if url.scheme == "http" else 443)
    if not host:
        return None                                        # not a URL this check understands: let the client try
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as e:
        why = e.strerror or type(e).__name__
        return f"{NO_NETWORK}: cannot reach {host}:{port} ({why})"


def _from_hub(repo, download):
    from huggingface_hub import constants, snapshot_download

    partial = False
    try:                                                   # 1. the cache, without the network
        cached = Path(snapshot_download(repo, allow_patterns=COURSE_FILES, local_files_only=True))
        if _complete(cached):
            return cached
        partial = True
    except (OSError, ValueError):                          # LocalEntryNotFoundError is an OSError
        pass
    offline = _hub_offline()
    unreachable = None if not download or offline else _unreachable(constants.ENDPOINT)
    if download and not offline and not unreachable:       # 2. the Hub (or the mirror in HF_ENDPOINT)
        print(T("Downloading {repo} from {endpoint} into {cache} (once; an interrupted download resumes; "
                "Ctrl-C and --tiny to skip).", "正在从 {endpoint} 下载 {repo} 到 {cache}（只需一次；中断后可接着下载；"
                "按 Ctrl-C 并加 --tiny 可跳过）。", repo=repo, endpoint=constants.ENDPOINT, cache=constants.HF_HUB_CACHE),
              file=sys.stderr, flush=True)
        try:
            return _model_folder(Path(snapshot_download(repo, allow_patterns=COURSE_FILES)))
        except KeyboardInterrupt:
            raise
        except Exception as e:                             # network, auth, disk: all end the same way
            reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    else:
        reason = "HF_HUB_OFFLINE is set" if offline else unreachable or "download=False"
    if partial:
        reason += "; the cached copy is incomplete"
    mirror = not through_mirror()                          # the mirror in HF_ENDPOINT failed: not suggested again
    error = ModelNotFound(
        "Could not find {repo}. Looked in: $QWEN_MODEL ({env_en}), the Hugging Face cache "
        "({cache}), then the Hub at {endpoint} ({reason}).\n"
        "  Download it:            {get}\n"
        + ("  Through a mirror:       HF_ENDPOINT=<mirror URL> {get}\n" if mirror else "") +
        "  Already have a folder:  python main.py --model PATH   (or set QWEN_MODEL=PATH)\n"
        "  No model at all:        python main.py --tiny   (built-in tiny checkpoint, made-up numbers)",
        "找不到 {repo}。查找过：$QWEN_MODEL（{env_zh}）、Hugging Face 缓存（{cache}）、"
        "Hub {endpoint}（{reason}）。\n"
        "  下载模型：          {get}\n"
        + ("  通过镜像下载：      HF_ENDPOINT=<镜像地址> {get}\n" if mirror else "") +
        "  已有模型文件夹：    python main.py --model PATH   （或设置 QWEN_MODEL=PATH）\n"
        "  完全没有模型：      python main.py --tiny   （内置的小检查点，数值是编造的）",
        repo=repo, env_en=os.environ.get("QWEN_MODEL") or "not set", env_zh=os.environ.get("QWEN_MODEL") or "未设置",
        get="python main.py download" + ("" if repo == DEFAULT_REPO else f" --model {repo}"), cache=constants.HF_HUB_CACHE,
        endpoint=constants.ENDPOINT, reason=reason)
    error.reason = reason                                  # why nothing was downloaded, for a one-line fallback
    raise error
