"""What the real Qwen3.5-0.8B shows, for the lines a chapter prints after a tiny-checkpoint figure.

On the built-in tiny checkpoint every number is made up. Where a figure only means something on
the real model, a chapter prints the tiny figure, then the real one, labelled, from here:

- `real_inventory()`: the real checkpoint's published inventory (file sizes, config, all 488
  tensor names, shapes and dtypes; bench/qwen3.5-0.8b-manifest.json). Counts, sizes and
  groupings computed from it are exact.
- `CH03`: figures printed by the original course's chapter 3 run on the real weights.
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


def real_inventory():
    """The manifest as a dict, or None when the file is not there (an installed copy of the package)."""
    if not MANIFEST.is_file():
        return None
    return json.loads(MANIFEST.read_text(encoding="utf-8"))
