"""What the real Qwen3.5-0.8B shows, for the lines a chapter prints after a tiny-checkpoint figure.

On the built-in tiny checkpoint every number is made up. Where a figure only means something on
the real model, a chapter prints the tiny figure, then the real one, labelled, from here:

- `real_inventory()`: the real checkpoint's published inventory (file sizes, config, all 488
  tensor names, shapes and dtypes; bench/qwen3.5-0.8b-manifest.json). Counts, sizes and
  groupings computed from it are exact.
- `CH03`: figures printed by the original course's chapter 3 run on the real weights.
- `is_published(cfg, W)`: whether a checkpoint shows the published weights' figures (CH03's norm
  weights). A checkpoint written in the real format with random weights has the real names,
  shapes and dtypes, so those alone cannot tell it from the published one; values can. Where a
  chapter says what a trained model does (where a head looks, what a reply says, how often a
  draft is accepted), that holds only on the published checkpoint, and anything else gets a label.
"""
import json
from pathlib import Path

MANIFEST = Path(__file__).resolve().parents[1] / "bench" / "qwen3.5-0.8b-manifest.json"

CH03 = {                                         # recorded on Qwen/Qwen3.5-0.8B (x = 5 * randn, seed 0)
    "input_rms": [5.14, 5.05, 4.84],
    "after_layer0_input_norm": [1.24, 1.24, 1.25],
    "after_final_norm": [4.33, 4.32, 4.34],
    "layer0_w": {"mean": 0.238, "min": -0.11, "max": 1.00},
    "final_w": {"mean": 3.309, "min": -0.78, "max": 5.31},
}


# How close a checkpoint's figure must be to CH03's: they are given to 3 decimals (mean) and 2
# (min, max), so half a unit of that last digit, and as much again for a different reduction order.
PUBLISHED_SLACK = {"mean": 0.001, "min": 0.01, "max": 0.01}
PUBLISHED_SHAPE = {"hidden_size": 1024, "num_hidden_layers": 24, "vocab_size": 248320}   # Qwen3.5-0.8B's


def published_gaps(cfg, W):
    """[(what, this checkpoint's value, the published one)] for each figure of the published
    Qwen3.5-0.8B this checkpoint does not show: the config's size, then the stored weights of
    layers.0.input_layernorm and of the final norm (mean, min, max: CH03). [] when it shows them all."""
    gaps = [(key, getattr(cfg, key, None), want) for key, want in PUBLISHED_SHAPE.items()
            if getattr(cfg, key, None) != want]
    if gaps:
        return gaps
    for key, known in (("layers.0.input_layernorm.weight", CH03["layer0_w"]), ("norm.weight", CH03["final_w"])):
        w = W[key].float()
        got = {"mean": w.mean().item(), "min": w.min().item(), "max": w.max().item()}
        gaps += [(f"{key} {stat}", got[stat], known[stat]) for stat in known
                 if not abs(got[stat] - known[stat]) <= PUBLISHED_SLACK[stat]]
    return gaps


def is_published(cfg, W):
    """True when the checkpoint (its Config, its weights W) shows every figure of the published
    Qwen3.5-0.8B the course knows (published_gaps): the only checkpoint on which a chapter's
    claims about trained behaviour are known to hold. Reads two 1024-number norm weights."""
    return not published_gaps(cfg, W)


def real_inventory():
    """The manifest as a dict, or None when the file is not there (an installed copy of the package)."""
    if not MANIFEST.is_file():
        return None
    return json.loads(MANIFEST.read_text(encoding="utf-8"))
