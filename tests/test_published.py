"""Telling the published Qwen3.5-0.8B from other checkpoints, and the labels on trained-behaviour claims.

A checkpoint in the real format with random weights has the real names, shapes and dtypes; only
values tell it from the published one (engine/known.py: CH03's figures of two norm weights). Chapters
10-13 label what they say about a trained model's behaviour (where a head looks, what a reply says,
how often a draft is accepted, how many greedy tokens quantizing keeps) on any checkpoint not
shown to be the published one; before, only the built-in tiny checkpoint got the labels."""
import contextlib
import io
import json
import runpy
import shutil
import sys

import pytest
import torch

from conftest import ROOT
from engine.known import CH03, MANIFEST, is_published, published_gaps
from qwen.config import Config
from qwen.weights import load_weights


def _with_figures(stats, n=1024):
    """n bf16 numbers whose mean, min and max are stats' (to well within CH03's printed digits)."""
    lo, hi, mean = stats["min"], stats["max"], stats["mean"]
    rest = (mean * n - lo - hi) / (n - 2)
    spread = torch.linspace(-1, 1, n - 2) * min(rest - lo, hi - rest) * 0.5      # symmetric: the mean stays
    w = torch.cat([torch.tensor([lo, hi]), rest + spread]).bfloat16()
    assert abs(w.float().mean().item() - mean) < 2e-4 and w.float().min().item() == pytest.approx(lo, abs=5e-3)
    return w


def _norms_only(folder, layer0, final, config=None):
    """A folder with the published config.json (or `config`) and only the two norm weights CH03 knows."""
    from safetensors.torch import save_file
    folder.mkdir()
    config = config or json.loads(MANIFEST.read_text(encoding="utf-8"))["config"]
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    save_file({"model.language_model.layers.0.input_layernorm.weight": layer0,
               "model.language_model.norm.weight": final}, str(folder / "model.safetensors"))
    return Config.load(folder), load_weights(folder)


def test_the_published_figures_are_told_from_random_weights_of_the_same_format(tmp_path):
    cfg, W = _norms_only(tmp_path / "published", _with_figures(CH03["layer0_w"]), _with_figures(CH03["final_w"]))
    assert is_published(cfg, W) and published_gaps(cfg, W) == []
    g = torch.Generator().manual_seed(0)
    random = [(torch.randn(1024, generator=g) * 0.02).bfloat16() for _ in range(2)]     # as an initialiser writes
    cfg, W = _norms_only(tmp_path / "random", *random)
    gaps = published_gaps(cfg, W)
    assert not is_published(cfg, W) and {g[0] for g in gaps} >= {"norm.weight mean", "layers.0.input_layernorm.weight mean"}
    zeros = torch.zeros(1024, dtype=torch.bfloat16)                                     # transformers' own init
    cfg, W = _norms_only(tmp_path / "zeros", zeros, zeros.clone())
    assert not is_published(cfg, W)
    near = _with_figures(dict(CH03["final_w"], mean=CH03["final_w"]["mean"] + 0.01))     # one figure off
    cfg, W = _norms_only(tmp_path / "near", _with_figures(CH03["layer0_w"]), near)
    assert [g[0] for g in published_gaps(cfg, W)] == ["norm.weight mean"]


def _chapter(script, folder, *args):
    """(namespace, stdout) of a chapter run in this process on the checkpoint `folder`."""
    argv, grad, threads, out = sys.argv, torch.is_grad_enabled(), torch.get_num_threads(), io.StringIO()
    sys.argv = [str(ROOT / script), "--model", str(folder), "--lang", "en", *args]
    try:
        with contextlib.redirect_stdout(out):
            ns = runpy.run_path(sys.argv[0], run_name="__main__")
    finally:
        sys.argv = argv
        torch.set_grad_enabled(grad)
        torch.set_num_threads(threads)
    return ns, out.getvalue()


@pytest.fixture(scope="module")
def random_real_format(tiny_path, tmp_path_factory):
    """The built-in tiny checkpoint's files without its marker: the real format, random weights, and
    nothing that says 'tiny'."""
    from engine.tiny import MARKER
    folder = tmp_path_factory.mktemp("random") / "ck"
    shutil.copytree(tiny_path, folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    del config[MARKER]
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


LABELLED = {
    "ch10_vision.py": ([], ["where a head looks"]),
    "ch11_seeing.py": (["--max-new-tokens", "3"], ["the reply describes the picture", "the top tokens with and without the picture"]),
    "ch12_mtp.py": (["--max-new-tokens", "6"], ["the head's guesses", "the head's acceptance, teacher-forced",
                                                "the drafts accepted in a reply"]),
    "ch13_quantize.py": (["--tokens", "3"], ["greedy tokens and logits kept by quantizing"]),
}


@pytest.mark.parametrize("script", sorted(LABELLED))
def test_random_weights_in_the_real_format_get_the_labels(random_real_format, script):
    args, claims = LABELLED[script]
    ns, out = _chapter(script, random_real_format, *args)
    ch = ns["ch"]
    assert not ch.tiny and not ch.published
    assert ch.labelled == claims
    assert out.count("not shown to be the published Qwen3.5-0.8B (hidden_size: 16, published 1024)") == len(claims)
