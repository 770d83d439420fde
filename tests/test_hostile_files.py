"""Whatever a checkpoint folder holds, the loader answers with one line: no traceback, no hang,
no gigabytes of memory, no wrong data.

Each case builds one hostile folder. All cases then run in one child process (a hang or a crash
there cannot take pytest down) with a memory limit and a per-case alarm; the child reports, per
case, the exception type, its message and the CPU seconds it took (a loaded machine stretches wall
time, not CPU time: 3.6 s of wall for one case at load 8), and its own peak memory. The
permission cases run in a second child without the capabilities that let root read anything.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import ROOT
from engine.tiny import REAL_SHARD_NAME, tiny_config, write_checkpoint
from qwen.files import INDEX_NAME

SHARD = REAL_SHARD_NAME
GiB = 1 << 30

# The child: runs each case as the course opens it (Config.load, engine's open_weights and load_tokenizer,
# then a read), under a memory limit and a 20-second (wall) alarm per case, for a read that blocks.
CHILD = r"""
import json, os, resource, signal, sys, time
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[2]), int(sys.argv[2])))
from qwen.config import Config
from engine.checkpoint import open_weights as load_weights
from engine.tokens import load_tokenizer

def peak_mb():   # VmHWM: this process's own peak (ru_maxrss would count the parent's size at fork)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

def alarm(*_):
    raise TimeoutError("took more than 20 s")

CALLS = {"config": Config.load, "weights": load_weights, "tokenizer": load_tokenizer}
BASE = peak_mb()                                       # after the imports (torch's among them)
signal.signal(signal.SIGALRM, alarm)
for case in json.loads(open(sys.argv[1], encoding="utf-8").read()):
    start = time.process_time()
    signal.alarm(20)
    try:
        CALLS[case["call"]](case["path"])
        out = {"type": None, "message": ""}
    except BaseException as e:
        out = {"type": type(e).__name__, "qwen": type(e).__module__.startswith("qwen"), "message": str(e)}
    signal.alarm(0)
    out.update(id=case["id"], seconds=time.process_time() - start,
               peak_mb=peak_mb())
    print(json.dumps(out), flush=True)
print(json.dumps({"peak_mb": peak_mb() - BASE}))
"""


def run_child(cases, tmp, prefix=(), memory=GiB):
    """Run the cases in a child; ({id: result}, the child's peak RSS in MB over its imports, its stderr)."""
    spec = Path(tmp) / "cases.json"
    spec.write_text(json.dumps(cases), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([*prefix, sys.executable, "-c", CHILD, str(spec), str(memory)], cwd=ROOT, env=env,
                       capture_output=True, text=True, encoding="utf-8", timeout=60)
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    return {r["id"]: r for r in lines[:-1]}, lines[-1]["peak_mb"], p.stderr


# ------------------------------------------------------------------------------ the cases

def small_checkpoint(folder):
    """The tiny config with three small tensors: enough for every header and folder case."""
    t = {f"model.language_model.{n}": torch.full((16,), 0.5, dtype=torch.bfloat16)
         for n in ("norm.weight", "layers.0.input_layernorm.weight", "layers.0.post_attention_layernorm.weight")}
    return write_checkpoint(folder, t, tiny_config())


def rewrite_header(folder, change):
    """Apply change(header dict) -> header dict (or bytes) to the shard's header; data stays."""
    file = folder / SHARD
    data = file.read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = change(json.loads(data[8:8 + n]))
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    file.write_bytes(len(raw).to_bytes(8, "little") + raw + data[8 + n:])


def edit_json(file, change):
    body = json.loads(file.read_text(encoding="utf-8"))
    file.write_text(json.dumps(change(body)), encoding="utf-8")


def edit_text_config(folder, drop=(), **fields):
    def change(c):
        text = {k: v for k, v in c["text_config"].items() if k not in drop}
        return {**c, "text_config": {**text, **fields}}
    edit_json(folder / "config.json", change)


def entry(field, value):
    def change(h):
        h["model.language_model.norm.weight"][field] = value
        return h
    return change


def alias(h):
    h["model.language_model.layers.0.input_layernorm.weight"]["data_offsets"] = \
        list(h["model.language_model.norm.weight"]["data_offsets"])
    return h


def overlap(h):
    b, e = h["model.language_model.norm.weight"]["data_offsets"]
    h["model.language_model.norm.weight"]["shape"] = [8]
    h["model.language_model.norm.weight"]["data_offsets"] = [b + 8, e - 8]
    h["model.language_model.norm.weight"]["dtype"] = "BF16"
    other = h["model.language_model.layers.0.input_layernorm.weight"]
    other["data_offsets"] = [b, b + 32]
    return h


def nested(depth=100_000):
    return "[" * depth + "]" * depth


def fifo(path):
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def sparse_header_length(folder, n=3_000_000_000):
    """An 8-byte prefix claiming 3 GB, in a sparse file that long (no disk space used)."""
    with open(folder / SHARD, "wb") as f:
        f.write(n.to_bytes(8, "little"))
        f.truncate(n + 1000)


def sparse(file, size):
    """A file that long, all zero bytes, using no disk space."""
    file.unlink(missing_ok=True)
    with open(file, "wb") as f:
        f.truncate(size)


def index_with(folder, change):
    edit_json(folder / INDEX_NAME, change)


def tokenizer_json(folder, body):
    (folder / "tokenizer.json").write_text(body if isinstance(body, str) else json.dumps(body), encoding="utf-8")


def bpe_json(**model):
    """A minimal byte-level BPE tokenizer.json, with model fields replaced."""
    from qwen.tokenizer import BYTE_TO_CHAR
    vocab = {c: b for b, c in BYTE_TO_CHAR.items()}
    return {"model": {"type": "BPE", "vocab": vocab, "merges": [], **model},
            "pre_tokenizer": {"type": "ByteLevel"}, "decoder": {"type": "ByteLevel"}}


def vocab_and_merges(folder):
    from qwen.tokenizer import BYTE_TO_CHAR
    (folder / "vocab.json").write_text(json.dumps({c: b for b, c in BYTE_TO_CHAR.items()}), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")


def no_config(folder):
    (folder / "config.json").unlink()


def no_index(folder):
    (folder / INDEX_NAME).unlink()


CASES = {  # id: (break the folder, what to call on it (path relative to it), words the one line must hold)
    # JSON: nesting and types
    "config_nested": (lambda d: (d / "config.json").write_text(nested()), "config", "config.json", "nested too deeply"),
    "index_nested": (lambda d: (d / INDEX_NAME).write_text(nested()), "weights", "", "nested too deeply"),
    "header_nested": (lambda d: rewrite_header(d, lambda h: nested().encode()), "weights", "", "nested too deeply"),
    "index_values_ints": (lambda d: index_with(d, lambda b: {**b, "weight_map": {k: 1 for k in b["weight_map"]}}),
                          "weights", "", "file name (strings)"),
    "index_names_outside": (lambda d: index_with(d, lambda b: {**b, "weight_map": {"x": "../../etc/passwd"}}),
                            "weights", "", "not a file name in the model folder"),
    "index_empty": (lambda d: index_with(d, lambda b: {**b, "weight_map": {}}), "weights", "",
                    "needs a \"weight_map\" object"),   # loaded as a checkpoint with no tensors at all
    "index_a_list": (lambda d: (d / INDEX_NAME).write_text("[1, 2]"), "weights", "", "\"weight_map\" object"),
    "config_a_list": (lambda d: (d / "config.json").write_text("[1]"), "config", "", "should hold a JSON object"),
    "layer_types_lists": (lambda d: edit_text_config(d, layer_types=[["full_attention"]] * 8), "config", "",
                          "'layer_types' should be"),
    "text_config_a_string": (lambda d: edit_json(d / "config.json", lambda c: {**c, "text_config": "x"}), "config",
                             "", "'text_config' should be a JSON object"),
    # files that are not files
    "shard_symlink_loop": (lambda d: ((d / SHARD).unlink(), (d / SHARD).symlink_to(d / SHARD)), "weights", "",
                           "loops back on itself"),
    "shard_symlink_dangling": (lambda d: ((d / SHARD).unlink(), (d / SHARD).symlink_to(d / "gone.safetensors")),
                               "weights", "", "gone.safetensors, which does not exist"),
    "shard_is_a_folder": (lambda d: ((d / SHARD).unlink(), (d / SHARD).mkdir()), "weights", "",
                          "is a folder, where a file was expected"),
    "shard_is_a_folder_no_index": (lambda d: (no_index(d), (d / SHARD).unlink(), (d / SHARD).mkdir()), "weights", "",
                                   "is a folder, where a file was expected"),
    "shard_fifo": (lambda d: fifo(d / SHARD), "weights", "", "not a regular file"),
    "shard_fifo_no_index": (lambda d: (no_index(d), fifo(d / SHARD)), "weights", "", "not a regular file"),
    "config_fifo": (lambda d: fifo(d / "config.json"), "config", "", "not a regular file"),
    "index_fifo": (lambda d: fifo(d / INDEX_NAME), "weights", "", "not a regular file"),
    "weights_given_a_bin_file": (lambda d: (d / "pytorch_model.bin").write_bytes(b"\x80\x04"), "weights",
                                 "pytorch_model.bin", "give the folder"),
    "weights_given_config_json": (lambda d: None, "weights", "config.json", "give the folder"),
    "config_given_a_folder_named_config_json": (lambda d: ((d / "config.json").unlink(), (d / "config.json").mkdir()),
                                                "config", "", "has no config.json"),
    # tokenizer files
    "tokenizer_a_list": (lambda d: tokenizer_json(d, [1, 2]), "tokenizer", "", "should hold a JSON object with a \"model\""),
    "tokenizer_nested": (lambda d: tokenizer_json(d, nested()), "tokenizer", "", "nested too deeply"),
    "tokenizer_fifo": (lambda d: fifo(d / "tokenizer.json"), "tokenizer", "", "not a regular file"),
    "tokenizer_vocab_a_list": (lambda d: tokenizer_json(d, bpe_json(vocab=[["a", 0]])), "tokenizer", "",
                               "a vocabulary: an object of byte-level symbol -> id"),
    "tokenizer_vocab_ids_floats": (lambda d: tokenizer_json(d, bpe_json(vocab={"a": 0.5})), "tokenizer", "",
                                   "a vocabulary"),
    "tokenizer_vocab_without_bytes": (lambda d: tokenizer_json(d, bpe_json(vocab={"a": 0})), "tokenizer", "",
                                      "all 256 byte symbols (255 are missing"),
    "tokenizer_merges_ints": (lambda d: tokenizer_json(d, bpe_json(merges=[1, 2])), "tokenizer", "", "merges: pairs"),
    "tokenizer_merges_lists_of_ints": (lambda d: tokenizer_json(d, bpe_json(merges=[[1, 2]])), "tokenizer", "",
                                       "the merge 1 + 2 makes 3, which is not in the vocabulary"),
    "tokenizer_merges_nested_lists": (lambda d: tokenizer_json(d, bpe_json(merges=[[["a"], ["b"]]])), "tokenizer",
                                      "", "merges: pairs"),
    "tokenizer_added_tokens_wrong": (lambda d: tokenizer_json(d, {**bpe_json(), "added_tokens": [{"id": 5}]}),
                                     "tokenizer", "", "added_tokens"),
    "tokenizer_empty_special_token": (lambda d: tokenizer_json(d, {**bpe_json(), "added_tokens": [
        {"id": 300, "content": ""}]}), "tokenizer", "", "added_tokens"),
    "tokenizer_pre_tokenizer_a_list": (lambda d: tokenizer_json(d, {**bpe_json(), "pre_tokenizer": [1],
                                                                     "decoder": {"type": "ByteLevel"}}),
                                       "tokenizer", "", "pre_tokenizer"),
    "tokenizer_bad_regex": (lambda d: tokenizer_json(d, {**bpe_json(), "pre_tokenizer": {"type": "Sequence",
        "pretokenizers": [{"type": "Split", "pattern": {"Regex": "(("}}, {"type": "ByteLevel"}]}}),
        "tokenizer", "", "a valid split regex"),
    "tokenizer_normalizer_nfkc": (lambda d: tokenizer_json(d, {**bpe_json(), "normalizer": {"type": "NFKC"}}),
                                  "tokenizer", "", "normalizer NFKC is not supported"),
    "tokenizer_normalizer_mentions_nfc": (lambda d: tokenizer_json(d, {**bpe_json(), "normalizer": {
        "type": "Replace", "pattern": {"String": "NFC"}, "content": ""}}), "tokenizer", "",
        "normalizer Replace is not supported"),
    "tokenizer_vocab_ids_repeat": (lambda d: tokenizer_json(d, bpe_json(vocab={**bpe_json()["model"]["vocab"],
                                                                               "zz": 90})),
                                   "tokenizer", "", "the id 90 belongs to two tokens"),
    "tokenizer_special_id_of_a_token": (lambda d: tokenizer_json(d, {**bpe_json(), "added_tokens": [
        {"id": 97, "content": "<x>"}]}), "tokenizer", "", "the id 97 belongs to two tokens"),
    "tokenizer_300k_special_tokens": (lambda d: tokenizer_json(d, {**bpe_json(), "added_tokens": [
        {"id": 1000 + i, "content": f"<|t{i}|>"} for i in range(300_000)]}), "tokenizer", "",
        "at most 4,096 special tokens (it has 300,000"),    # a 12 MB file: 36 s, 1 GB to load, encode() crawled
    "tokenizer_ids_past_the_embedding": (lambda d: tokenizer_json(d, {**bpe_json(), "added_tokens": [
        {"id": 300_000, "content": "<x>"}]}), "tokenizer", "",
        "has token ids up to 300,000, but config.json's vocab_size is 248,320"),   # not ch02's "300,001 ids"
    "tokenizer_id_past_2_to_the_24": (lambda d: (no_config(d), tokenizer_json(d, bpe_json(
        vocab={**bpe_json()["model"]["vocab"], "zz": 10**30}))), "tokenizer", "", "ids from 0 to 16,777,215"),
    "tokenizer_json_60_MB": (lambda d: sparse(d / "tokenizer.json", 60_000_000), "tokenizer", "",
                             "is 60,000,000 bytes"),          # the real one: 12.8 MB; 90 MB takes 1.6 GB to parse
    "merges_txt_150_MB": (lambda d: (vocab_and_merges(d), sparse(d / "merges.txt", 150_000_000)), "tokenizer", "",
                          "is 150,000,000 bytes"),              # refused, never silently cut at 100 MB
    "merges_txt_bad_line": (lambda d: (vocab_and_merges(d), (d / "merges.txt").write_text("#version: 0.2\nab\n")),
                            "tokenizer", "", "merges: pairs"),
    "merges_txt_fifo": (lambda d: (vocab_and_merges(d), fifo(d / "merges.txt")), "tokenizer", "", "not a regular file"),
    "tokenizer_config_wrong_types": (lambda d: (vocab_and_merges(d), (d / "tokenizer_config.json").write_text(
        '{"added_tokens_decoder": {"x": 3}}')), "tokenizer", "", "added_tokens_decoder"),
    # a number of over 4,300 digits: Python's json raises a plain ValueError (a traceback), on every JSON file
    "tokenizer_id_of_5000_digits": (lambda d: tokenizer_json(d, json.dumps(bpe_json()).replace(
        '"a": 97', '"a": ' + "9" * 5000)), "tokenizer", "", "not valid JSON (a number with more than 4,300 digits)"),
    "config_of_5000_digits": (lambda d: (d / "config.json").write_text((d / "config.json").read_text().replace(
        '"rms_norm_eps": 1e-06', '"rms_norm_eps": ' + "1" * 5000)), "config", "", "a number with more than 4,300"),
    # special tokens whose text or id the code could not use: UnicodeEncodeError or ValueError tracebacks
    "tokenizer_special_lone_surrogate": (lambda d: tokenizer_json(d, {**bpe_json(), "added_tokens": [
        {"id": 300, "content": "<x\ud800>"}]}), "tokenizer", "", "added_tokens: a list of"),
    "tokenizer_config_lone_surrogate": (lambda d: (vocab_and_merges(d), (d / "tokenizer_config.json").write_text(
        json.dumps({"added_tokens_decoder": {"300": {"content": "\ud800"}}}))), "tokenizer", "", "added_tokens_decoder"),
    "tokenizer_config_id_superscript": (lambda d: (vocab_and_merges(d), (d / "tokenizer_config.json").write_text(
        json.dumps({"added_tokens_decoder": {"3\u00b2": {"content": "<x>"}}}))), "tokenizer", "", "added_tokens_decoder"),
    "tokenizer_config_id_of_5000_digits": (lambda d: (vocab_and_merges(d), (d / "tokenizer_config.json").write_text(
        json.dumps({"added_tokens_decoder": {"9" * 5000: {"content": "<x>"}}}))), "tokenizer", "", "added_tokens_decoder"),
    # the safetensors header
    "header_length_3_GB": (sparse_header_length, "weights", "", "header claims 3,000,000,000 bytes, over the"),
    "offsets_float": (lambda d: rewrite_header(d, entry("data_offsets", [0.0, 32.0])), "weights", "", "malformed"),
    "offsets_bool": (lambda d: rewrite_header(d, entry("data_offsets", [False, 32])), "weights", "", "malformed"),
    "shape_float": (lambda d: rewrite_header(d, entry("shape", [16.0])), "weights", "", "malformed"),
    "shape_bool": (lambda d: rewrite_header(d, entry("shape", [True, 16])), "weights", "", "malformed"),
    "entry_a_string": (lambda d: rewrite_header(d, lambda h: {**h, "model.language_model.norm.weight": "x"}),
                       "weights", "", "malformed"),
    "shape_empty_but_past_int64": (lambda d: rewrite_header(d, lambda h: {**h, "model.language_model.z": {
        "dtype": "BF16", "shape": [0, 2**64], "data_offsets": [0, 0]}}), "weights", "", "malformed"),
    "shape_empty_but_strides_overflow": (lambda d: rewrite_header(d, lambda h: {**h, "model.language_model.z": {
        "dtype": "BF16", "shape": [0, 2**62, 4], "data_offsets": [0, 0]}}), "weights", "", "malformed"),
    "weights_stored_as_integers": (lambda d: rewrite_header(d, entry("dtype", "I16")), "weights", "",
                                   "norm.weight is stored as I16"),   # said at load, not inside ch03's load_state_dict
    "offsets_aliased": (lambda d: rewrite_header(d, alias), "weights", "", "share bytes"),
    "offsets_overlap": (lambda d: rewrite_header(d, overlap), "weights", "", "share bytes"),
    "header_not_utf8": (lambda d: rewrite_header(d, lambda h: json.dumps(h).encode().replace(b"norm", b"n\xffm")),
                        "weights", "", "header is not UTF-8"),
    "header_utf16": (lambda d: rewrite_header(d, lambda h: json.dumps(h).encode("utf-16")), "weights", "",
                     "header is not UTF-8"),
    "dtype_f8": (lambda d: rewrite_header(d, entry("dtype", "F8_E4M3")), "weights", "",
                 "unsupported dtype F8_E4M3; this course reads BF16, F16, F32"),
    "dtype_i4": (lambda d: rewrite_header(d, entry("dtype", "I4")), "weights", "", "unsupported dtype I4"),
    # config values
    "eps_nan": (lambda d: (d / "config.json").write_text(
        (d / "config.json").read_text().replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": NaN')), "config", "",
        "'rms_norm_eps' should be a number between 0 and 1"),
    "eps_1e999": (lambda d: (d / "config.json").write_text(
        (d / "config.json").read_text().replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": 1e999')), "config", "",
        "'rms_norm_eps' should be"),
    "eps_negative": (lambda d: edit_text_config(d, rms_norm_eps=-1e-6), "config", "", "'rms_norm_eps' should be"),
    "layers_10_to_the_12": (lambda d: edit_text_config(d, ("layer_types",), num_hidden_layers=10**12),
                            "config", "", "'num_hidden_layers' should be an integer from 1 to 1,024"),
    "hidden_size_10_to_the_30": (lambda d: edit_text_config(d, hidden_size=10**30), "config", "",
                                 "'hidden_size' should be an integer from 1 to 65,536"),
    "heads_not_in_groups": (lambda d: edit_text_config(d, num_attention_heads=3, num_key_value_heads=2), "config", "",
                            "'num_attention_heads' should be a multiple of num_key_value_heads"),
    "config_against_tensor_shapes": (lambda d: edit_text_config(d, hidden_size=32), "weights", "",
                                     "by the config, model.language_model.layers.0.input_layernorm.weight has shape [32]"),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    base = small_checkpoint(tmp / "base")
    cases = []
    for name, (breaker, call, target, _) in CASES.items():
        folder = shutil.copytree(base, tmp / name)
        breaker(folder)
        cases.append({"id": name, "call": call, "path": str(folder / target)})
    return run_child(cases, tmp)


@pytest.mark.parametrize("case", list(CASES))
def test_one_line_naming_the_file(results, case):
    found, _, _ = results
    r = found[case]
    words = CASES[case][3]
    assert r["type"] is not None and r["qwen"], r                      # a QwenError, not a crash
    assert "\n" not in r["message"] and words in r["message"], r["message"]
    assert "/" + case in r["message"] or case in r["message"], r["message"]   # the path is named
    assert r["seconds"] < 2, r


def test_the_child_stayed_small_and_quiet(results):
    _, peak, err = results
    assert err == ""                                                    # no traceback, no warning
    assert peak < 150, peak                                             # MB over the imports, all cases together



# ------------------------------------------------------------------------------ permissions

def unprivileged():
    """How to start a child that file permissions apply to: (argv prefix, preexec_fn). Tests often
    run as root, which reads anything: drop its capabilities (setpriv), else become `nobody`."""
    if os.geteuid() != 0:
        return (), None
    setpriv = shutil.which("setpriv")
    drop = (setpriv, "--bounding-set=-all", "--inh-caps=-all") if setpriv else None
    if drop and subprocess.run([*drop, "true"], capture_output=True).returncode == 0:
        return drop, None
    try:
        import pwd
        nobody = pwd.getpwnam("nobody")
    except (ImportError, KeyError):
        pytest.skip("running as root, with neither setpriv nor a 'nobody' user to drop privileges")
    return (), lambda: (os.setgid(nobody.pw_gid), os.setuid(nobody.pw_uid))


PERMISSION_CASES = {  # id: (what to make unreadable, what to call, the path the line must name)
    "config_unreadable": ("config.json", "config", "config.json"),
    "index_unreadable": (INDEX_NAME, "weights", INDEX_NAME),
    "shard_unreadable": (SHARD, "weights", SHARD),
    "tokenizer_unreadable": ("tokenizer.json", "tokenizer", "tokenizer.json"),
    "folder_unreadable": ("", "weights", ""),
    "folder_unreadable_config": ("", "config", ""),
}


def test_permission_denied_is_one_line_naming_the_file():
    import tempfile
    prefix, preexec = unprivileged()
    tmp = Path(tempfile.mkdtemp(prefix="tbh-perm-"))
    try:
        tmp.chmod(0o755)                                  # reachable for `nobody` too
        base = small_checkpoint(tmp / "base")
        (base / "tokenizer.json").write_text("{}", encoding="utf-8")
        cases = []
        for name, (target, call, _) in PERMISSION_CASES.items():
            folder = shutil.copytree(base, tmp / name)
            (folder / target).chmod(0)
            cases.append({"id": name, "call": call, "path": str(folder)})
        spec = tmp / "cases.json"
        spec.write_text(json.dumps(cases), encoding="utf-8")
        p = subprocess.run([*prefix, sys.executable, "-c", CHILD, str(spec), str(GiB)], cwd=ROOT,
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=preexec,
                           capture_output=True, text=True, encoding="utf-8", timeout=60)
        assert p.returncode == 0 and p.stderr == "", p.stderr[-2000:]
        found = {r["id"]: r for r in map(json.loads, p.stdout.splitlines()) if "id" in r}
        for name, (target, _, named) in PERMISSION_CASES.items():
            r = found[name]
            assert r["qwen"] and "\n" not in r["message"], r
            assert r["message"].startswith(f"Permission denied: {tmp / name / named}".rstrip("/") + " "), r
            assert r["seconds"] < 2
    finally:
        for sub in tmp.iterdir():
            if sub.is_dir():
                sub.chmod(0o755)
                for f in sub.iterdir():
                    f.chmod(0o644)
        shutil.rmtree(tmp)


# ------------------------------------------------------------------------------ a file that changes later

def change_and_read(folder, how, results):
    """In a forked child: open the weights, change the file as a re-download would, read again."""
    from qwen.lang import QwenError
    from qwen.weights import load_weights
    W = load_weights(folder)
    W["norm.weight"][0].item()                     # the file is now mapped, its first page read
    info = W.info("big.weight")
    if how == "truncate":                          # a re-download rewriting the file in place
        os.truncate(info.file, info.offset)
    elif how == "rewrite":                         # new bytes, same size, same file
        before = os.stat(info.file).st_mtime_ns
        with open(info.file, "r+b") as f:
            f.seek(info.offset + info.nbytes - 2)
            f.write(b"\x00\x40")                   # the last element: 1.0 -> 2.0
        os.utime(info.file, ns=(before + 10**9, before + 10**9))   # as a download a second later would
    else:                                          # a re-download replacing it
        shutil.copyfile(info.file, folder / "new")
        os.replace(folder / "new", info.file)
    out = {}
    for what, read in (("W[name]", lambda: W["big.weight"][-1].item()),     # a page past the new end
                       ("W.rows", lambda: W.rows("big.weight", [(1 << 20) - 1]))):
        try:
            read()
            out[what] = None
        except QwenError as e:
            out[what] = str(e)
    results.put(out)


@pytest.mark.parametrize("how", ["truncate", "replace", "rewrite"])
def test_a_shard_changed_after_loading_is_one_line_not_a_bus_error(tmp_path, how):
    """Truncated in place (reading its mapped pages would be a bus error, killing the process
    with no message), replaced by a new file (the old data would be read silently), or rewritten
    in place at the same size (the new data would be read silently)."""
    import multiprocessing
    t = {"model.language_model.norm.weight": torch.ones(16, dtype=torch.bfloat16),
         "model.language_model.big.weight": torch.ones(1 << 20, dtype=torch.bfloat16)}   # 2 MB: many pages
    folder = write_checkpoint(tmp_path, t, tiny_config())
    ctx = multiprocessing.get_context("fork")      # torch is already imported here: no second import
    results = ctx.Queue()
    child = ctx.Process(target=change_and_read, args=(folder, how, results))
    child.start()
    child.join(30)
    assert child.exitcode == 0, child.exitcode                    # -7 would be the bus error
    for what, message in results.get(timeout=5).items():
        assert message == f"{folder / SHARD}: the file changed on disk since it was opened (a new download?); " \
                          "run again.", (what, message)


# ------------------------------------------------------------------------------ as a learner sees it

@pytest.mark.parametrize("case", ["config_nested", "layers_10_to_the_12"])
def test_a_script_prints_one_line_and_exits_1(tmp_path, run_script, case):
    """Through main.py, which reads the config before any chapter (and before `import torch`);
    tests/test_bad_input.py runs chapter 1 itself on broken shards."""
    folder = shutil.copytree(small_checkpoint(tmp_path / "base"), tmp_path / case)
    CASES[case][0](folder)
    r = run_script("main.py", "1", "--model", folder)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    first, *rest = r.stderr.splitlines()
    assert first.startswith("Error: ") and CASES[case][3] in first and str(folder) in first
    assert rest == ["(run again with --debug to see the full traceback)"]


# ------------------------------------------------------------------------------ odd tensors, odd arguments

def test_rows_of_a_single_number_and_names_that_are_not_strings(tmp_path):
    """A 0-d tensor has no rows; W[5], W.rows(name, 3): one line each, not a TypeError."""
    from qwen.lang import QwenError
    from qwen.weights import load_weights
    t = {"model.language_model.norm.weight": torch.ones(16, dtype=torch.bfloat16),
         "model.language_model.scale": torch.tensor(2.0, dtype=torch.bfloat16)}
    W = load_weights(write_checkpoint(tmp_path, t, tiny_config()))
    assert W["scale"].item() == 2.0 and W.rows("norm.weight", torch.tensor([1, 2])).shape == (2,)
    for call, words in ((lambda: W.rows("scale", [0]), "scale is a single number (shape []): it has no rows"),
                        (lambda: W.rows("norm.weight", 3), "a list of whole numbers, not 3 (int)"),
                        (lambda: W.rows("norm.weight", torch.tensor(3)), "a list of whole numbers, not tensor(3)"),
                        (lambda: W[5], "Tensor names are strings, not 5 (int)"),
                        (lambda: W.rows(None, [0]), "Tensor names are strings, not None (NoneType)")):
        with pytest.raises(QwenError) as e:
            call()
        assert words in str(e.value) and "\n" not in str(e.value), str(e.value)



def test_a_tower_weight_stored_as_integers_is_one_line_naming_it(tmp_path):
    """engine/checkpoint.py checks the tower's dtypes as the language model's: a float parameter stored
    as int32 (same shape) is one line naming it, not torch's state_dict error."""
    from qwen.lang import QwenError
    from engine.checkpoint import open_weights
    from engine.tiny import tiny_tensors
    t = tiny_tensors()
    t["model.visual.merger.norm.weight"] = t["model.visual.merger.norm.weight"].to(torch.int32)
    folder = write_checkpoint(tmp_path, t, tiny_config())
    with pytest.raises(QwenError) as e:
        open_weights(folder)
    assert "model.visual.merger.norm.weight is stored as I32, but a model's weights are floating-point" in str(e.value)
    assert "\n" not in str(e.value)


def test_a_vision_config_that_disagrees_with_the_tower_names_config_json(tmp_path):
    """The config's tower shapes against the stored ones, naming config.json. A text-only load of the
    same folder still works when the vision_config cannot even be read."""
    from qwen.lang import QwenError
    from qwen.model import load_model
    from engine.checkpoint import open_weights
    from engine.tiny import tiny_tensors
    config = tiny_config()
    config["vision_config"] = {**config["vision_config"], "patch_size": 2 * config["vision_config"]["patch_size"]}
    folder = write_checkpoint(tmp_path, tiny_tensors(), config)
    with pytest.raises(QwenError) as e:
        open_weights(folder)
    text = str(e.value)
    assert "config.json and the weights disagree: by the config, model.visual.patch_embed.proj.weight" in text, text
    config["vision_config"]["depth"] = 0                                  # unreadable: the text model loads
    folder = write_checkpoint(tmp_path / "text", tiny_tensors(), config)
    assert load_model(folder, vision=False).visual is None
