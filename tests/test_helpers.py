"""The test helper writes the layouts it promises (other tests rely on them)."""
import torch

from helpers import write_transformers_checkpoint
from qwen.weights import Config, load_weights


def test_transformers_checkpoints_have_the_promised_layouts(tmp_path):
    flat = load_weights(write_transformers_checkpoint(tmp_path / "flat", "text", torch.float32, tied=False))
    assert "model.layers.0.input_layernorm.weight" in flat.all_names and "lm_head.weight" in flat.all_names
    assert flat.dtype("layers.3.self_attn.q_norm.weight") == torch.float32
    multi = write_transformers_checkpoint(tmp_path / "multi", "multimodal", torch.float32, tied=False)
    names = load_weights(multi).all_names
    assert "model.language_model.norm.weight" in names and any(n.startswith("model.visual.") for n in names)
    assert "text_config" in Config.load(multi).raw
    tied = write_transformers_checkpoint(tmp_path / "tied", "text", torch.bfloat16, tied=True)
    W = load_weights(tied)
    assert "lm_head.weight" not in W.all_names and W.dtype("embed_tokens.weight") == torch.bfloat16
    assert Config.load(tied).tie_word_embeddings is True


def test_a_test_session_leaves_no_folder_behind(tmp_path):
    """The session's folder (tiny checkpoint, Hugging Face cache, the checkpoints transformers
    writes) is removed when pytest ends: runs used to leave ~30 MB each in the system's temp."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_XDIST_WORKER", "TBH_TEST_TMP")}
    env["TMPDIR"] = str(tmp)
    root = Path(__file__).resolve().parents[1]
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp",
                        str(tmp_path / "base"), "tests/test_mlp.py::test_wrong_size_names_the_key"],
                       cwd=root, env=env, capture_output=True, text=True, timeout=100)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert sorted(x.name for x in tmp.iterdir()) == []
