"""What a long training run needs around qwen/pretrain.py's loop: a checkpoint that survives Ctrl-C
and resumes to the same curve, a stop on a NaN loss, a progress line, and the trained model saved in
the real checkpoint format (config.json, model.safetensors with the real key names, the tokenizer).

A run's state is one file, RUN_FILE, in the run's folder: the weights, AdamW's moments, the step,
the stream's position, torch's random state and the losses so far. It is written to a temporary
file and renamed over the old one, so a crash or a Ctrl-C while writing leaves the last good one.
"""
import json
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

import torch

from engine.tiny import write_checkpoint, write_tokenizer_files
from qwen.config import Config
from qwen.lang import QwenError, tr
from qwen.model import Qwen35
from qwen.pretrain import train_step

RUN_FILE = "run.pt"
KIND = "transformer-by-hand training run"


def save_run(folder, model, opt, stream, step, losses, config, extra=None):
    """The whole state of a run, atomically: RUN_FILE is the old state or the new one, never half."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {"kind": KIND, "config": json.dumps(config), "step": step, "losses": list(losses),
             "model": model.state_dict(), "opt": opt.state_dict(), "stream": stream.state_dict(),
             "rng": torch.get_rng_state(), "extra": dict(extra or {})}
    tmp = folder / f"{RUN_FILE}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / RUN_FILE)
    return folder / RUN_FILE


def load_run(folder, config):
    """The saved state of the run in `folder` for a model of `config`, or None when there is none.
    One line, and nothing touched, for a file that is truncated, not a run, or a run of another model."""
    file = Path(folder) / RUN_FILE
    if not file.is_file():
        return None
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as e:                                          # truncated, or not torch.save's format
        raise QwenError("{file} is not a complete training run ({why}). Move it away to start afresh.",
                        "{file} 不是完整的训练存档（{why}）。把它移走即可重新开始。",
                        file=file, why=type(e).__name__) from None
    if not isinstance(state, dict) or state.get("kind") != KIND:
        raise QwenError("{file} is not a training run of this course. Move it away to start afresh.",
                        "{file} 不是本课程的训练存档。把它移走即可重新开始。", file=file)
    if json.loads(state["config"]) != config:
        raise QwenError("{file} is a run of another model or text: give another --run folder, or the same "
                        "options and text.", "{file} 训练的是另一个模型或另一段文字：请换一个 --run 文件夹，或用同样的选项和文字。",
                        file=file)
    return state


def resume(state, model, opt, stream):
    """Put a saved state back: the weights, AdamW's moments, the stream's position, the random state.
    Returns (step, losses) to go on from."""
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    stream.load_state_dict(state["stream"])
    torch.set_rng_state(state["rng"])
    return state["step"], list(state["losses"])


def run(model, opt, stream, steps, lr, folder=None, config=None, every=50, start=0, losses=None,
        quiet=False, step_fn=train_step, extra=None):
    """Train from step `start` to `steps` with lr(step); save the run every `every` steps and at the end.
    Ctrl-C lets the step under way finish (an update cut in half would be saved half-made), saves, and
    returns; a NaN or infinite loss stops before its update is kept in a save, the last good one stays.
    Returns (losses, stopped): stopped is None, "interrupted", or the step whose loss was not finite."""
    losses, begun, tokens0 = list(losses or []), time.perf_counter(), stream.tokens_seen
    asked = []
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, lambda *_: asked.append(True))
    else:                                                          # signals reach the main thread only
        previous = None
    try:
        for step in range(start, steps):
            loss, _ = step_fn(model, opt, stream.next(), lr(step))
            if not math.isfinite(loss):
                return losses, step
            losses.append(loss)
            last = step + 1 == steps or bool(asked)
            if folder is not None and ((step + 1) % every == 0 or last):
                save_run(folder, model, opt, stream, step + 1, losses, config, extra)
            if not quiet:
                _progress(step + 1, steps, loss, stream.tokens_seen - tokens0, time.perf_counter() - begun, start)
            if asked:
                return losses, "interrupted"
        return losses, None
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        if not quiet:
            print()


def _progress(step, steps, loss, tokens, seconds, start):
    """One line, rewritten in place: a bar, the step, the loss, tokens/s and the time left."""
    done = (step - start) / max(1, steps - start)
    rate = tokens / max(seconds, 1e-9)
    left = seconds / max(done, 1e-9) - seconds
    bar = "#" * int(24 * step / steps) + "." * (24 - int(24 * step / steps))
    line = tr("  [{bar}] step {s}/{n}  loss {l:.3f}  {r:,.0f} tokens/s  {t:.0f} s left",
              "  [{bar}] 第 {s}/{n} 步  损失 {l:.3f}  每秒 {r:,.0f} 个词元  还剩 {t:.0f} 秒",
              bar=bar, s=step, n=steps, l=loss, r=rate, t=left)
    end = "\r" if sys.stdout.isatty() else "\n"
    if sys.stdout.isatty() or step == steps or step % max(1, steps // 10) == 0:
        print(line, end=end, flush=True)


def export(model, config, folder, write_tokenizer=write_tokenizer_files, dtype=torch.bfloat16):
    """The trained model as a checkpoint folder in the real format, which every chapter (--model) and
    transformers load: config.json, model.safetensors with the real key names (model.layers.N...),
    and the tokenizer files (write_tokenizer(folder): the real vocabulary's unless told otherwise)."""
    folder = Path(folder)
    tensors = {("model." + k if k != "lm_head.weight" else k): v.detach().to(dtype)
               for k, v in model.state_dict().items()}
    for name in list(tensors):                                       # the real exceptions stay fp32
        if name.endswith(("linear_attn.A_log", "linear_attn.norm.weight")):
            tensors[name] = model.state_dict()[name.removeprefix("model.")].detach().float()
    write_checkpoint(folder, tensors, {**config, "dtype": str(dtype).removeprefix("torch.")})
    write_tokenizer(folder)
    return folder


def build(config):
    """An untrained Qwen35 of a config dict (random values: qwen.pretrain.init_weights fills them)."""
    return Qwen35(Config.from_dict(config, source="the training config"))

