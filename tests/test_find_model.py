"""find_model: the order it looks in, the cache without network, the offline message."""
import fnmatch
import os
from pathlib import Path

import pytest

from qwen.lang import QwenError, set_lang
from engine.tiny import REAL_SHARD_NAME
from engine.hub import COURSE_FILES, DEFAULT_REPO, ModelNotFound, find_model
def folder(path):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text("{}", encoding="utf-8")
    return path


def fake_hf_cache(repo=DEFAULT_REPO, commit="2fc06364715b967f1860aea9cf38778875588b17", weights=True):
    """The Hugging Face cache layout: models--Org--Name/{refs/main, snapshots/<commit>/}."""
    from huggingface_hub import constants
    repo_dir = Path(constants.HF_HUB_CACHE) / ("models--" + repo.replace("/", "--"))
    (repo_dir / "refs").mkdir(parents=True, exist_ok=True)
    (repo_dir / "refs" / "main").write_text(commit, encoding="utf-8")
    snap = folder(repo_dir / "snapshots" / commit)
    if weights:
        (snap / REAL_SHARD_NAME).write_bytes(b"")
    return snap


@pytest.fixture
def no_cache():
    import shutil
    from huggingface_hub import constants
    shutil.rmtree(constants.HF_HUB_CACHE, ignore_errors=True)
    yield
    shutil.rmtree(constants.HF_HUB_CACHE, ignore_errors=True)


def test_explicit_path_comes_first(tmp_path, monkeypatch):
    monkeypatch.setenv("QWEN_MODEL", str(folder(tmp_path / "env")))
    assert find_model(folder(tmp_path / "arg")) == tmp_path / "arg"


def test_qwen_model_comes_next(tmp_path, monkeypatch):
    monkeypatch.setenv("QWEN_MODEL", str(folder(tmp_path / "env")))
    assert find_model() == tmp_path / "env"


def test_a_file_in_the_folder_means_the_folder(tmp_path):
    assert find_model(folder(tmp_path / "m") / "config.json") == tmp_path / "m"


def test_a_file_outside_a_model_folder_is_named(tmp_path):
    (tmp_path / "notes.txt").write_text("x", encoding="utf-8")
    with pytest.raises(QwenError, match=r"notes\.txt is a file, and its folder has no config\.json"):
        find_model(tmp_path / "notes.txt")


def test_then_the_hugging_face_cache_without_network(no_cache):
    snap = fake_hf_cache()
    assert find_model() == snap
    assert find_model(DEFAULT_REPO) == snap


def test_offline_and_not_cached_says_where_it_looked_and_what_to_do(no_cache):
    with pytest.raises(ModelNotFound) as e:
        find_model()
    msg = str(e.value)
    from huggingface_hub import constants
    for part in ("Qwen/Qwen3.5-0.8B", constants.HF_HUB_CACHE, "HF_HUB_OFFLINE", "python main.py download",
                 "HF_ENDPOINT", "--model PATH", "--tiny"):
        assert part in msg
    assert "(-)" not in msg and "$QWEN_MODEL (not set)" in msg
    set_lang("zh")
    assert "找不到" in str(e.value) and "python main.py download" in str(e.value) and "$QWEN_MODEL（未设置）" in str(e.value)
    set_lang("en")
    with pytest.raises(ModelNotFound) as e:
        find_model("Qwen/Qwen3.5-2B")
    assert "Download it:            python main.py download --model Qwen/Qwen3.5-2B" in str(e.value)


def test_missing_path_is_not_mistaken_for_a_repo(tmp_path):
    with pytest.raises(QwenError, match="does not exist"):
        find_model(tmp_path / "no" / "such" / "folder")
    with pytest.raises(QwenError, match="does not exist"):
        find_model("./Qwen3.5-0.8B")


def test_folder_without_config_is_refused(tmp_path):
    with pytest.raises(QwenError, match="has no config.json"):
        find_model(tmp_path)


def test_downloads_only_the_course_files_when_online(tmp_path, monkeypatch, no_cache):
    """Online: the cache is tried first (local_files_only), then snapshot_download with patterns."""
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError
    calls = []
    target = folder(tmp_path / "downloaded")

    def fake_snapshot_download(repo_id, allow_patterns=None, local_files_only=False, **kw):
        calls.append((repo_id, tuple(allow_patterns), local_files_only))
        if local_files_only:
            raise LocalEntryNotFoundError("not cached")
        return str(target)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    monkeypatch.setattr("engine.hub._hub_offline", lambda: False)
    monkeypatch.setattr("engine.hub._unreachable", lambda endpoint: None)     # online
    assert find_model("Qwen/Qwen3.5-2B") == target
    assert [c[2] for c in calls] == [True, False] and calls[1][0] == "Qwen/Qwen3.5-2B"
    wanted = lambda name: any(fnmatch.fnmatch(name, p) for p in calls[1][1])
    for name in (REAL_SHARD_NAME, "model.safetensors.index.json", "config.json", "tokenizer.json",
                 "model-00001-of-00002.safetensors", "vocab.json", "merges.txt", "chat_template.jinja",
                 "preprocessor_config.json"):
        assert wanted(name), name
    for name in ("README.md", "LICENSE", "video_preprocessor_config.json", "pytorch_model.bin"):
        assert not wanted(name), name


def test_a_failed_download_becomes_the_same_clear_message(monkeypatch, no_cache):
    import huggingface_hub

    def fail(repo_id, local_files_only=False, **kw):
        raise OSError("Name or service not known")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fail)
    monkeypatch.setattr("engine.hub._hub_offline", lambda: False)
    monkeypatch.setattr("engine.hub._unreachable", lambda endpoint: None)     # the host answers, the download fails
    with pytest.raises(ModelNotFound, match="Name or service not known"):
        find_model()



def test_an_incomplete_cached_download_is_resumed_not_used(monkeypatch, no_cache):
    """config.json cached but the weights missing (an interrupted download): download again."""
    import huggingface_hub
    snap = fake_hf_cache(weights=False)
    (snap / "model.safetensors.index.json").write_text(
        '{"metadata": {}, "weight_map": {"a": "' + REAL_SHARD_NAME + '"}}', encoding="utf-8")
    with pytest.raises(ModelNotFound, match="the cached copy is incomplete"):
        find_model()                                               # offline: say so, do not use it
    calls = []
    real = huggingface_hub.snapshot_download

    def resume(repo_id, local_files_only=False, **kw):
        calls.append(local_files_only)
        if not local_files_only:                                   # the "download" finishes the file
            (snap / REAL_SHARD_NAME).write_bytes(b"")
        return real(repo_id, local_files_only=True, **kw)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", resume)
    monkeypatch.setattr("engine.hub._hub_offline", lambda: False)
    monkeypatch.setattr("engine.hub._unreachable", lambda endpoint: None)     # online
    assert find_model() == snap and calls == [True, False]


# ---------------------------------------------------------------- no network, HF_HUB_OFFLINE unset

def test_without_network_nothing_is_downloaded_and_the_reason_says_so(monkeypatch, no_cache):
    """No name lookup or connection possible: no download is tried (the Hub client's attempt prints a
    line, retries and takes longer), and the error names the host it could not reach."""
    import socket
    import huggingface_hub
    tried = []
    real = huggingface_hub.snapshot_download

    def record(repo_id, local_files_only=False, **kw):
        tried.append(local_files_only)
        return real(repo_id, local_files_only=True, **kw)

    def no_network(*a, **kw):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", record)
    monkeypatch.setattr("engine.hub._hub_offline", lambda: False)
    monkeypatch.setattr(socket, "create_connection", no_network)
    for name in PROXIES:                                           # behind a proxy the client decides
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ModelNotFound) as e:
        find_model()
    assert tried == [True]                                         # the cache only
    assert e.value.reason.startswith("no network") and "huggingface.co:443" in e.value.reason


CHAPTER_START = "from engine.cli import chapter\nchapter('a', 'a', argv=[])\n"
PROXIES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_chapter_without_network_says_one_line_before_the_banner(run_script, lang):
    """HF_HUB_OFFLINE unset, the model not cached and the Hub unreachable: a chapter prints one line before
    the banner (not a download line, the failure, what to do and the fallback), then the run goes on."""
    r = run_script("-c", CHAPTER_START, env={"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9", "QWEN_LANG": lang,
                                             **dict.fromkeys(PROXIES, "")})
    assert r.returncode == 0 and "Traceback" not in r.stdout + r.stderr, r.stderr
    before = (r.stderr + r.stdout).split("=" * 78)[0]
    lines = [line for line in before.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "Qwen/Qwen3.5-0.8B" in lines[0] and "127.0.0.1:9" in lines[0]
    assert ("内置的小检查点" if lang == "zh" else "built-in tiny checkpoint") in lines[0]

