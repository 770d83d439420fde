"""Reference solution for 201."""
import json


def read_header(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")     # header length: unsigned 64-bit, little-endian
        header = json.loads(f.read(n))              # name -> {dtype, shape, data_offsets}
    header.pop("__metadata__", None)                # free-form strings, not a tensor
    return header, 8 + n
