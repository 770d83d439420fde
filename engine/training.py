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
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import torch

from engine.tiny import write_checkpoint, write_tokenizer_files
from qwen.config import Config
from qwen.files import folder_to_write
from qwen.lang import QwenError, tr
from qwen.model import Qwen35
from qwen.pretrain import train_step

RUN_FILE = "run.pt"
KIND = "transformer-by-hand training run"


PREVIOUS = "run.previous.pt"                          # the save before the last: where a bad update rolls back to
KEYS = ("kind", "config", "step", "losses", "model", "opt", "stream", "rng", "extra")


def check_folder(folder):
    """One line, before any training, when the run's folder cannot be one: it or a parent is a file
    (qwen.files.folder_to_write, as chapter 16 checks its --run), or it cannot be made."""
    folder = folder_to_write(folder, origin="--run")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise QwenError("--run {f}: cannot be the run's folder ({why}). Give a folder (new or this chapter's own).",
                        "--run {f}：不能用作训练的文件夹（{why}）。请给一个文件夹（新的或本章自己的）。",
                        f=folder, why=e.strerror or type(e).__name__) from None
    return folder


def save_run(folder, model, opt, stream, step, losses, config, extra=None):
    """The whole state of a run, atomically: RUN_FILE is the old state or the new one, never half; the
    state it replaces is kept as PREVIOUS (rollback puts it back)."""
    folder = check_folder(folder)
    state = {"kind": KIND, "config": json.dumps(config), "step": step, "losses": list(losses),
             "model": model.state_dict(), "opt": opt.state_dict(), "stream": stream.state_dict(),
             "rng": torch.get_rng_state(), "extra": dict(extra or {})}
    tmp = folder / f"{RUN_FILE}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    if (folder / RUN_FILE).is_file():
        kept = folder / f"{PREVIOUS}.tmp{os.getpid()}"
        shutil.copyfile(folder / RUN_FILE, kept)
        os.replace(kept, folder / PREVIOUS)
    elif (folder / PREVIOUS).is_file():                 # a new run: the save before is another run's
        os.replace(folder / PREVIOUS, folder / "run.previous-of-an-older-run.pt")
    os.replace(tmp, folder / RUN_FILE)
    return folder / RUN_FILE


def rollback(folder, bad_step):
    """After the weights of step `bad_step` gave a loss that is not a number: if RUN_FILE holds them (saved
    at that step or later), put the save before it back, and keep the bad one as run.bad.pt. Returns the
    step of the run now in RUN_FILE (None when there is none)."""
    folder = Path(folder)
    step = saved_step(folder)
    if step is None or step < bad_step:
        return step
    os.replace(folder / RUN_FILE, folder / "run.bad.pt")
    if (folder / PREVIOUS).is_file():
        os.replace(folder / PREVIOUS, folder / RUN_FILE)
    return saved_step(folder)


def saved_step(folder):
    """The step of the run saved in `folder` (None when there is none)."""
    file = Path(folder) / RUN_FILE
    return torch.load(file, map_location="cpu", weights_only=True)["step"] if file.is_file() else None


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
    if missing := [k for k in KEYS if k not in state]:
        raise QwenError("{file} is not a complete training run (no {key}). Move it away to start afresh.",
                        "{file} 不是完整的训练存档（没有 {key}）。把它移走即可重新开始。", file=file, key=missing[0])
    if json.loads(state["config"]) != config:
        raise QwenError("{file} is a run of another model or text: give another --run folder, or the same "
                        "options and text.", "{file} 训练的是另一个模型或另一段文字：请换一个 --run 文件夹，或用同样的选项和文字。",
                        file=file)
    return state


def resume(state, model, opt, stream):
    """Put a saved state back: the weights, AdamW's moments, the stream's position, the random state.
    Returns (step, losses) to go on from."""
    try:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        stream.load_state_dict(state["stream"])
        torch.set_rng_state(state["rng"])
        return int(state["step"]), list(state["losses"])
    except (RuntimeError, KeyError, ValueError, TypeError, IndexError) as e:
        raise QwenError("The saved run does not fit this model ({why}). Move run.pt away to start afresh.",
                        "保存的训练存档与这个模型不符（{why}）。把 run.pt 移走即可重新开始。",
                        why=str(e).splitlines()[0][:160]) from None


def run(model, opt, stream, steps, lr, folder=None, config=None, every=50, start=0, losses=None,
        quiet=False, step_fn=train_step, extra=None):
    """Train from step `start` to `steps` with lr(step); save the run every `every` steps and at the end.
    Ctrl-C lets the step under way finish (an update cut in half would be saved half-made), saves, and
    returns; a NaN or infinite loss stops, and a save of the weights that gave it is rolled back: the last
    good save stays in RUN_FILE.
    Returns (losses, stopped): stopped is None, "interrupted", or the step whose loss was not finite."""
    losses, begun, tokens0 = list(losses or []), time.perf_counter(), stream.tokens_seen
    asked = []
    if folder is not None and threading.current_thread() is threading.main_thread():   # nothing to save: Ctrl-C stops
        previous = signal.signal(signal.SIGINT, lambda *_: asked.append(True))
    else:                                                          # signals reach the main thread only
        previous = None
    try:
        for step in range(start, steps):
            loss, _ = step_fn(model, opt, stream.next(), lr(step))
            if not math.isfinite(loss):                                # these weights are bad: not in run.pt
                if folder is not None:
                    rollback(folder, step)
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
    and the tokenizer files (write_tokenizer(folder): the real vocabulary's unless told otherwise).
    Every file is written whole beside the folder first, then renamed into it: an export cut short leaves
    each file as it was or as it is now, never half-written, and files of the folder it does not write stay."""
    folder = check_folder(folder)
    tmp = folder.with_name(f".{folder.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tensors = {("model." + k if k != "lm_head.weight" else k): v.detach().to(dtype)
               for k, v in model.state_dict().items()}
    for name in list(tensors):                                       # the real exceptions stay fp32
        if name.endswith(("linear_attn.A_log", "linear_attn.norm.weight")):
            tensors[name] = model.state_dict()[name.removeprefix("model.")].detach().float()
    try:
        write_checkpoint(tmp, tensors, {**config, "dtype": str(dtype).removeprefix("torch.")})
        write_tokenizer(tmp)
        for file in sorted(tmp.iterdir(), key=lambda f: f.name == "config.json"):   # config.json last
            os.replace(file, folder / file.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def build(config):
    """An untrained Qwen35 of a config dict (random values: qwen.pretrain.init_weights fills them)."""
    return Qwen35(Config.from_dict(config, source="the training config"))

