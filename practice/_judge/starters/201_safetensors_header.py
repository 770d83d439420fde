"""Exercise 201 · Read a safetensors header by hand (easy; no PyTorch needed)

A .safetensors file starts with 8 bytes: one unsigned 64-bit integer n, little-endian. The next
n bytes are a JSON object: for each tensor, its "dtype", "shape" and "data_offsets" [begin, end]
(counted from the start of the data). The tensor bytes start right after, at byte 8 + n. The
JSON may also hold a "__metadata__" entry, which is not a tensor.

Write read_header(path) -> (header, data_start):
  header      {name: {"dtype": ..., "shape": [...], "data_offsets": [begin, end]}}, no "__metadata__"
  data_start  the byte where the data starts (8 + n)

练习 201 · 手工读取 safetensors 文件头（简单；不需要 PyTorch）

.safetensors 文件以 8 个字节开头：一个小端序的 64 位无符号整数 n。接下来的 n 个字节是一个 JSON
对象：每个张量的 "dtype"、"shape" 和 "data_offsets" [begin, end]（从数据区开头算起）。张量的字节
紧跟其后，从第 8 + n 字节开始。JSON 里还可能有一个 "__metadata__" 条目，它不是张量。

写出 read_header(path) -> (header, data_start)：
  header      {名字: {"dtype": ..., "shape": [...], "data_offsets": [begin, end]}}，不含 "__metadata__"
  data_start  数据区开始的字节位置（8 + n）

Check: python practice/judge.py 201
"""
import json


def read_header(path):
    raise NotImplementedError
