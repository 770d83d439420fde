"""Chapter 12's counts and labels: the language model counted without the tower (which it never
loads), the replayed "mix" called a mix only when its rounds were of more than one kind, and an MTP
head with a tensor missing or mis-shaped said in one line instead of a traceback."""
import json
import shutil

import pytest
import torch

from test_published import _chapter


@pytest.fixture(scope="module")
def short_and_long(tiny_path):
    """Chapter 12 on the tiny checkpoint with a 6-token reply (one round of replayed drafts) and a
    16-token one (the tiny default)."""
    return {n: _chapter("ch12_mtp.py", tiny_path, "--max-new-tokens", str(n)) for n in (6, 16)}


def test_the_language_model_is_counted_without_the_vision_tower(short_and_long, tiny_path):
    """ch12 neither loads the vision tower (it never uses it) nor counts it into 'the language model':
    752 M at full size, not 853 M."""
    from qwen.weights import load_weights
    ns, _ = short_and_long[6]
    W = load_weights(tiny_path)
    assert ns["model"].visual is None
    assert any(n.startswith("model.visual.") for n in W.all_names)          # there, and left unread
    assert ns["lm_params"] == sum(W.info(n).numel for n in W)              # the language-model tensors, as stored
    assert ns["head_params"] == sum(W.info(n).numel for n in W.all_names if n.startswith("mtp."))


def test_the_mix_is_called_a_mix_only_when_its_rounds_differ(short_and_long):
    for n, (ns, out) in short_and_long.items():
        kinds = ns["mix_rounds"]
        assert ns["mix_happened"] == (len(set(kinds)) > 1)
        line = next(li for li in out.splitlines() if "mix" in li and "tokens per forward pass; the plain" in li)
        assert line.lstrip().startswith("a mix (") == ns["mix_happened"], line
    assert not short_and_long[6][0]["mix_happened"] and short_and_long[16][0]["mix_happened"]
    assert short_and_long[16][0]["mix_rounds"][:3] == ["all", "one", "none"]


def _head_changed(tiny_path, folder, change):
    """The tiny checkpoint with its mtp.* tensors changed by change(tensors)."""
    from safetensors.torch import load_file, save_file
    from engine.tiny import REAL_SHARD_NAME
    shutil.copytree(tiny_path, folder)
    tensors = load_file(folder / REAL_SHARD_NAME)
    change(tensors)
    save_file(tensors, folder / REAL_SHARD_NAME, metadata={"format": "pt"})
    index = json.loads((folder / "model.safetensors.index.json").read_text(encoding="utf-8"))
    index["weight_map"] = {k: REAL_SHARD_NAME for k in tensors}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    return folder


@pytest.mark.parametrize("what", ["missing", "shape"])
def test_a_broken_mtp_head_is_one_line(run_script, tiny_path, tmp_path, what):
    def change(tensors):
        if what == "missing":
            del tensors["mtp.fc.weight"]
        else:
            tensors["mtp.norm.weight"] = torch.zeros(3, dtype=torch.bfloat16)
    folder = _head_changed(tiny_path, tmp_path / what, change)
    r = run_script("ch12_mtp.py", "--model", folder, "--lang", "en")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    lines = [li for li in r.stdout.splitlines() if "speculative decoding is unavailable" in li]
    key = "mtp.fc.weight" if what == "missing" else "mtp.norm.weight"
    assert len(lines) == 1 and key in lines[0], r.stdout
    assert "1. The head by hand" not in r.stdout                           # it stops before computing anything
