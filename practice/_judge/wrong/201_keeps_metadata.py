"""Wrong on purpose (judge --verify): forgets that __metadata__ is not a tensor."""
import json


def read_header(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(n)), 8 + n
