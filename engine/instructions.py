"""What chapter 16's fine-tuning needs around qwen/lora.py: its instruction pairs, batches of them, a loss
that runs the output layer only where a label counts, and the tokenizer files of an exported model.

The pairs (data/instructions.jsonl) are the course's own: short questions about it, in English and
Chinese, each reply in one fixed form ("In one line: ...", "一句话：..."), one JSON object a line,
{"prompt": ..., "reply": ...}.

Why the loss skips positions: the output layer computes 248,320 scores a position, most of a step's
work on the tiny checkpoint and a large part on the real one, and with the prompts' labels at -100
(and the padding's) only the reply positions count. Their cross-entropy is next_token_loss's number.
"""
import json
import shutil
from pathlib import Path

import torch
import torch.nn.functional as F

from qwen.lang import QwenError

INSTRUCTIONS = Path(__file__).resolve().parent / "data" / "instructions.jsonl"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "vocab.json", "merges.txt")


def read_pairs(file=INSTRUCTIONS):
    """[{"prompt": str, "reply": str}] of a JSON-lines file; one line naming the line that is not one."""
    pairs = []
    with open(file, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                pair = json.loads(line)
            except json.JSONDecodeError:
                pair = None
            if not (isinstance(pair, dict) and isinstance(pair.get("prompt"), str) and isinstance(pair.get("reply"), str)):
                raise QwenError("{file}, line {n}: not a JSON object with a \"prompt\" and a \"reply\" string.",
                                "{file} 第 {n} 行：不是带 \"prompt\"（提示词）和 \"reply\"（回复）字符串的 JSON 对象。", file=file, n=n)
            pairs.append(pair)
    return pairs


def pad_batch(items, pad):
    """[(ids, labels)] -> (ids, labels), each (batch, longest), padded on the right with `pad` and -100: a
    causal layer never reads a later position, so the padding changes nothing before it."""
    longest = max(len(ids) for ids, _ in items)
    ids = torch.tensor([ids + [pad] * (longest - len(ids)) for ids, _ in items])
    labels = torch.tensor([labels + [-100] * (longest - len(labels)) for _, labels in items])
    return ids, labels


def final_hidden(model, ids):
    """ids (batch, seq) -> the final normed hidden states (batch, seq, hidden): qwen/model.py's forward
    for text, without its output layer."""
    x = model.embed_tokens(ids)
    cos, sin = model.rotary(torch.arange(ids.shape[1]))
    for layer in model.layers:
        x = layer(x, cos, sin)
    return model.norm(x)


def reply_loss(model, batch):
    """next_token_loss(model(ids), labels), with the output layer run only at the positions whose next
    label counts."""
    ids, labels = batch
    counted = labels[:, 1:] != -100                                  # (batch, seq - 1)
    h = final_hidden(model, ids)[:, :-1][counted]                    # (counted, hidden)
    return F.cross_entropy(model.logits(h), labels[:, 1:][counted])


def copy_tokenizer(source):
    """A write_tokenizer for engine.training.export: the tokenizer files of the folder `source`."""
    def write(folder):
        for name in TOKENIZER_FILES:
            if (Path(source) / name).is_file():
                shutil.copyfile(Path(source) / name, Path(folder) / name)
        return folder
    return write
