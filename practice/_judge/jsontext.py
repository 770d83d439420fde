"""The JSON the judge writes for others to read (`--json`, the page's replies, the progress file), strict.

Python's json module writes an infinite or NaN float as `Infinity` or `NaN`, which is not JSON: a
browser's JSON.parse (and Node's, and jq) refuses the whole text. A failing case's numbers hold such
values often (a top-p filter's -inf, a difference of two infinities), so they are written as the
strings "inf", "-inf" and "nan", which a reader shows as they are, and json.dumps is told to refuse
any other non-finite value rather than write it.
"""
import json
import math


def finite(value):
    """`value` with every non-finite float (inside dicts, lists and tuples) replaced by its name."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(value, **kwargs):
    """json.dumps of `value` as strict JSON (allow_nan=False), after finite()."""
    return json.dumps(finite(value), allow_nan=False, **kwargs)
