"""Wrong on purpose (judge --verify): reads the length as big-endian."""
import json


def read_header(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "big")
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header, 8 + n
