"""Wrong on purpose (judge --verify): the vision tower's tensors counted (only mtp.* left out)."""
import math
import re


def count_parameters(header, layer_types):
    counts = {"linear_attention": 0, "full_attention": 0, "outside_layers": 0}
    for name, entry in header.items():
        if name == "__metadata__" or name.startswith("mtp."):
            continue
        layer = re.match(r"model\.language_model\.layers\.(\d+)\.", name)
        kind = layer_types[int(layer.group(1))] if layer else "outside_layers"
        counts[kind] += math.prod(entry["shape"])
    return counts
