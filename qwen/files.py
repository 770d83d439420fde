"""Reading a checkpoint's own files (config.json, the index, tokenizer files): one place for what
can be wrong with a path or a JSON file, so every reader says it the same way, in one line."""
import json
from pathlib import Path

from qwen.lang import QwenError


def read_json(file):
    """A JSON file of the checkpoint (config, tokenizer files), or a clear message when it is broken."""
    try:
        return json.loads(Path(file).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise QwenError("{file} is not valid JSON ({why}). Download it again.",
                        "{file} 不是合法的 JSON（{why}）。请重新下载。", file=file, why=e) from None


def missing_path(path, origin="path"):
    return QwenError("{path} does not exist ({origin}). Check the spelling, or leave it out to "
                     "use the downloaded model.",
                     "{path} 不存在（来自 {origin}）。请检查拼写，或者不指定它，使用下载的模型。",
                     path=path, origin=origin)
