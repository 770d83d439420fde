"""Wrong on purpose (judge --verify): counts the mtp head as part of the language model."""
import math
import re


def count_parameters(header, layer_types):
    counts = {"linear_attention": 0, "full_attention": 0, "outside_layers": 0}
    for name, entry in header.items():
        if name.startswith("model.visual.") or name == "__metadata__":
            continue
        layer = re.match(r"model\.language_model\.layers\.(\d+)\.", name)
        counts[layer_types[int(layer.group(1))] if layer else "outside_layers"] += math.prod(entry["shape"])
    return counts
