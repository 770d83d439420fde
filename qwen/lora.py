"""LoRA by hand (chapter 16): fine-tuning a few million numbers instead of 0.8 billion, saved in PEFT's format.

The low-rank idea (Hu et al., 2021, "LoRA"): what fine-tuning changes in a weight matrix W (out, in)
has a low rank: the update dW is close to B @ A, with A (r, in) and B (out, r), r small (8 against
in = 1024). So W stays frozen, and only A and B learn:

    y = W x + (alpha / r) * B (A x)          A: in -> r numbers, B: r -> out

A 1024 x 3584 projection has 3.7 M weights; its adapter at r = 8 has 8 x (1024 + 3584) = 37 k, and
AdamW keeps its two moments for those only. The frozen base can stay in bf16; the adapters are fp32
(their updates are small, bf16 would round many of them away).

Why B = 0 at the start: then B A = 0, and step 0 is exactly the base model: training starts from what
the model already knows, not from noise. A is random (kaiming-uniform, as PEFT and nn.Linear do), so
the gradient of B, (dL/dy) (A x)^T, is not zero and learning can start (were both 0, neither would move).

Why alpha / r: the scale of the update should not depend on the rank chosen. With A's init the size of
B A x grows with r; dividing by r keeps it steady, so a learning rate tuned at r = 8 still fits at 16.
alpha is that fixed scale (PEFT's lora_alpha, commonly 2r).

Which projections: the LoRA paper adapted attention's q and v. In Qwen3.5 only every 4th layer has
attention, so q and v would reach 6 of 24 layers; QLoRA (Dettmers et al., 2023) found that adapting
every linear layer is what matches full fine-tuning. DEFAULT_TARGETS are every layer's big matrices:
attention's q, k, v, o, the DeltaNet's in_proj_qkv, in_proj_z and out_proj, the MLP's three. Left
out: the DeltaNet's in_proj_a and in_proj_b (16 output rows each: rank 8 is not low rank there, and
they set the decay and the write strength, the part of the rule most easily broken).

    add_lora(model, r=8, alpha=16)           every target wrapped, everything else frozen
    trainable(model)                         (trainable, total) parameters
    save_adapter(model, folder)              adapter_config.json + adapter_model.safetensors (PEFT's)
    load_adapter(model, folder)              ours or PEFT's, every key and shape checked
    merge(model)                             W + (alpha/r) B A folded in: the checkpoint's names again

The format is PEFT's, so an adapter trained here loads in `peft.PeftModel.from_pretrained` on
transformers' Qwen3_5ForCausalLM, and one trained there loads here (tests/test_lora.py checks both).
"""
import json
import math
import os
from pathlib import Path

import torch
import torch.nn as nn
from safetensors.torch import save_file

from qwen.files import folder_to_write, kind_of, read_json
from qwen.lang import QwenError
from qwen.weights import load_weights

DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "out_proj",
                   "gate_proj", "up_proj", "down_proj")
CONFIG, WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
# transformers' Qwen3_5ForCausalLM calls layer N "model.layers.N", and PEFT puts "base_model.model." before it;
# the multimodal model's language layers are under "model.language_model." (read, never written)
PREFIXES = ("base_model.model.model.", "base_model.model.model.language_model.")
# LoraConfig fields that would change what is computed, and the value that computes what this file does
PLAIN = {"bias": "none", "use_dora": False, "use_rslora": False, "fan_in_fan_out": False, "lora_bias": False,
         "modules_to_save": None, "layers_to_transform": None, "rank_pattern": {}, "alpha_pattern": {},
         "target_parameters": None, "alora_invocation_tokens": None, "trainable_token_indices": None}


class LoRALinear(nn.Module):
    """A frozen Linear (out, in) plus (alpha / r) B A: x (..., in) -> (..., out)."""

    def __init__(self, base, r, alpha):
        super().__init__()
        self.base_layer = base.requires_grad_(False)           # PEFT's name; its dtype is kept (bf16 stays bf16)
        self.in_features, self.out_features = base.in_features, base.out_features
        self.r, self.alpha, self.scaling = r, alpha, alpha / r
        device = base.weight.device
        self.lora_A = nn.Linear(self.in_features, r, bias=False, device=device, dtype=torch.float32)   # (r, in)
        self.lora_B = nn.Linear(r, self.out_features, bias=False, device=device, dtype=torch.float32)  # (out, r)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=5 ** 0.5)   # as nn.Linear and PEFT
        nn.init.zeros_(self.lora_B.weight)                         # B = 0: step 0 is the base model

    @property
    def weight(self):                                          # the base's: the blocks read its dtype
        return self.base_layer.weight

    def forward(self, x):
        y = self.base_layer(x)                                  # (..., out), in the base's dtype
        delta = self.lora_B(self.lora_A(x.to(torch.float32)))   # (..., r) -> (..., out), fp32
        return (y + self.scaling * delta).to(y.dtype)

    def extra_repr(self):
        return f"r={self.r}, alpha={self.alpha}"


def _layers(model):
    """(name, module) of the language model's layers only ("layers.3.self_attn.q_proj"), never the vision
    tower or the MTP head: the modules transformers' Qwen3_5ForCausalLM has."""
    return [(f"layers.{name}", m) for name, m in model.layers.named_modules()]


def _matches(name, targets):
    return any(name == t or name.endswith("." + t) for t in targets)       # PEFT's rule for a list


def _plan(model, targets, r):
    """{name: Linear} of the projections `targets` names, each target checked to name at least one, and
    r checked to be a low rank for each: below the smaller side of its weight."""
    if not isinstance(targets, (list, tuple)) or not targets or not all(isinstance(t, str) and t for t in targets) \
            or len(set(targets)) < len(targets):
        raise QwenError("targets is a non-empty list of different projection names such as ['q_proj', 'v_proj'], not "
                        "{t!r}.", "targets 是由不同投影名组成的非空列表，例如 ['q_proj', 'v_proj']，而不是 {t!r}。", t=targets)
    found = {n: m for n, m in _layers(model) if _matches(n, targets) and isinstance(m, (nn.Linear, LoRALinear))}
    for t in targets:
        if not any(_matches(n, [t]) for n in found):
            names = sorted({n.rsplit(".", 1)[-1] for n, m in _layers(model) if isinstance(m, nn.Linear)})
            raise QwenError("No projection of this model is called {t!r}; its projections are {names}.",
                            "这个模型没有名为 {t!r} 的投影；它的投影有 {names}。", t=t, names=", ".join(names))
    for name, m in found.items():
        if r >= (side := min(m.in_features, m.out_features)):
            raise QwenError("r={r} is not a low rank for {name} ({o} x {i}): r must be below {s}, its smaller side.",
                            "r={r} 对 {name}（{o} x {i}）来说不是低秩：r 必须小于它较小的一边 {s}。", r=r, name=name,
                            o=m.out_features, i=m.in_features, s=side)
    return found


def _check_rank(r, alpha, where):
    if isinstance(r, bool) or not isinstance(r, int) or r < 1 or isinstance(alpha, bool) or \
            not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha <= 0:
        raise QwenError("{where}: r must be a whole number >= 1 and alpha a finite number > 0, not r={r!r}, "
                        "alpha={alpha!r}.", "{where}：r 必须是不小于 1 的整数，alpha 必须是大于 0 的有限数，而不是 r={r!r}、"
                        "alpha={alpha!r}。",
                        where=where, r=r, alpha=alpha)


def add_lora(model, r=8, alpha=16, targets=DEFAULT_TARGETS):
    """Wrap every projection named in `targets` (PEFT's target_modules: the last part of a module's name)
    in a LoRALinear of rank r; freeze every other parameter. Returns the model (changed in place)."""
    _check_rank(r, alpha, "add_lora")
    plan = _plan(model, targets, r)
    if wrapped := [n for n, m in plan.items() if isinstance(m, LoRALinear)]:
        raise QwenError("{name} already has a LoRA adapter: merge(model) first, or load a fresh model.",
                        "{name} 已经有 LoRA 适配器：请先 merge(model)，或重新加载模型。", name=wrapped[0])
    model.requires_grad_(False)                                 # the base: frozen, all of it
    for name, base in plan.items():
        _swap(model, name, LoRALinear(base, r, alpha))
    return model


def _swap(model, name, new):
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent), child, new)


def adapters(model):
    """{name: LoRALinear} of the model, in order."""
    return {n: m for n, m in _layers(model) if isinstance(m, LoRALinear)}


def trainable(model):
    """(trainable, total) parameters: with rank-8 adapters on 0.8B's default targets, under 1 % train."""
    params = list(model.parameters())                           # the tied table once
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


# ---------------------------------------------------------------------------- PEFT's files
def save_adapter(model, folder):
    """The adapters as PEFT writes them: adapter_config.json and adapter_model.safetensors (fp32),
    both written to temporary files first and only then renamed into place, so a failure while writing
    leaves the old pair. The folder is checked before anything is written."""
    found = adapters(model)
    if not found:
        raise QwenError("This model has no LoRA adapter to save: add_lora(model) first.",
                        "这个模型没有可保存的 LoRA 适配器：请先 add_lora(model)。")
    first = next(iter(found.values()))
    if any((m.r, m.alpha) != (first.r, first.alpha) for m in found.values()):
        raise QwenError("The adapters have different ranks: PEFT's file has one r and one lora_alpha.",
                        "这些适配器的秩不同：PEFT 的文件只有一个 r 和一个 lora_alpha。")
    folder = folder_to_write(folder, (CONFIG, WEIGHTS))
    tensors = {}
    for name, m in found.items():                                # (r, in) and (out, r)
        tensors[f"{PREFIXES[0]}{name}.lora_A.weight"] = m.lora_A.weight.detach().float().cpu().contiguous()
        tensors[f"{PREFIXES[0]}{name}.lora_B.weight"] = m.lora_B.weight.detach().float().cpu().contiguous()
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": first.r, "lora_alpha": first.alpha,
              "target_modules": sorted({n.rsplit(".", 1)[-1] for n in found}), "lora_dropout": 0.0,
              "base_model_name_or_path": None if getattr(model, "path", None) is None else str(model.path),
              "inference_mode": True, "init_lora_weights": True, "revision": None, **PLAIN}
    folder.mkdir(parents=True, exist_ok=True)
    tmp = {name: folder / f".{name}.tmp" for name in (WEIGHTS, CONFIG)}
    try:
        save_file(tensors, str(tmp[WEIGHTS]), metadata={"format": "pt"})
        with open(tmp[CONFIG], "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2)
        for name, file in tmp.items():                          # both written: now both replace the old pair
            os.replace(file, folder / name)
    finally:
        for file in tmp.values():
            file.unlink(missing_ok=True)                        # left only where writing failed
    return folder


def _read_config(file):
    config = read_json(file)
    if not isinstance(config, dict) or config.get("peft_type") != "LORA":
        raise QwenError("{file} is not a LoRA adapter's config (peft_type {t!r}, not 'LORA').",
                        "{file} 不是 LoRA 适配器的配置（peft_type 是 {t!r}，不是 'LORA'）。",
                        file=file, t=config.get("peft_type") if isinstance(config, dict) else None)
    for key, plain in PLAIN.items():
        if config.get(key) and config[key] != plain:                 # absent, null, false, empty: the plain one
            raise QwenError("{file}: {key} = {v!r} is a LoRA variant this lesson does not compute; use an adapter "
                            "saved with {key} = {plain!r}.", "{file}：{key} = {v!r} 是本课不计算的 LoRA 变体；请使用 "
                            "{key} = {plain!r} 保存的适配器。", file=file, key=key, v=config[key], plain=plain)
    _check_rank(config.get("r"), config.get("lora_alpha"), file)
    targets = config.get("target_modules")
    if not isinstance(targets, list) or not targets or not all(isinstance(t, str) for t in targets):
        raise QwenError("{file}: target_modules must be a list of projection names, not {v!r}.",
                        "{file}：target_modules 必须是投影名的列表，而不是 {v!r}。", file=file, v=targets)
    return config


def _names(W, file):
    """{our name.lora_A / .lora_B: the file's key}, every key checked to be a LoRA matrix of a layer."""
    out = {}
    for key in W.all_names:
        prefix = next((p for p in reversed(PREFIXES) if key.startswith(p)), None)
        short = key[len(prefix):] if prefix else None
        if short is None or not short.endswith((".lora_A.weight", ".lora_B.weight")) or not short.startswith("layers."):
            raise QwenError("{file}: {key} is not a LoRA matrix of a language-model layer ({p}layers.N....lora_A.weight"
                            "): it is not an adapter for this model.", "{file}：{key} 不是语言模型某层的 LoRA 矩阵（"
                            "{p}layers.N....lora_A.weight）：它不是这个模型的适配器。", file=file, key=key, p=PREFIXES[0])
        out[short.removesuffix(".weight")] = key
    return out


def load_adapter(model, folder):
    """Read an adapter (ours or PEFT's) into the model, adding its LoRA layers when it has none yet. Every
    key and shape is checked before anything of the model changes; a mismatch is one line naming it.
    Adapters already there must have the file's rank; they take its lora_alpha."""
    folder = Path(folder)
    for name in (CONFIG, WEIGHTS):
        if kind_of(folder / name) is None:
            raise QwenError("{file} does not exist: an adapter folder holds {a} and {b} (qwen.lora.save_adapter or "
                            "PEFT's save_pretrained write them).", "{file} 不存在：适配器文件夹里应有 {a} 和 {b}"
                            "（由 qwen.lora.save_adapter 或 PEFT 的 save_pretrained 写出）。",
                            file=folder / name, a=CONFIG, b=WEIGHTS)
    config = _read_config(folder / CONFIG)
    r, alpha = config["r"], config["lora_alpha"]
    file = folder / WEIGHTS
    W = load_weights(file)                                       # headers only; a truncated file is refused here
    keys = _names(W, file)
    present = adapters(model)
    plan = present or _plan(model, config["target_modules"], r)
    for name, m in plan.items():
        if isinstance(m, LoRALinear) and m.r != r:
            raise QwenError("{name} has a rank-{have} adapter, {file} is rank {r}: load it into a model without "
                            "adapters (or add_lora with r={r}).", "{name} 的适配器秩为 {have}，{file} 的秩为 {r}：请把它"
                            "加载到没有适配器的模型里（或用 r={r} 调用 add_lora）。", name=name, have=m.r, file=file, r=r)
        for part, shape in (("lora_A", (r, m.in_features)), ("lora_B", (m.out_features, r))):
            if (key := keys.pop(f"{name}.{part}", None)) is None:
                raise QwenError("{file} has no {key}: the file is incomplete, or made for other projections than "
                                "this model's adapters. Save it again, or load it into a model without adapters.",
                                "{file} 里没有 {key}：文件不完整，或者是为与这个模型的适配器不同的投影做的。请重新保存，"
                                "或把它加载到没有适配器的模型里。", file=file, key=f"{PREFIXES[0]}{name}.{part}.weight")
            if tuple(W.shape(key)) != shape:
                raise QwenError("{file}: {key} has shape {got}, this model needs {want}: the adapter is for another "
                                "model or another rank.", "{file}：{key} 的形状是 {got}，这个模型需要 {want}："
                                "适配器属于别的模型或别的秩。", file=file, key=key, got=list(W.shape(key)), want=list(shape))
    if keys:
        raise QwenError("{file}: {key} has no projection in this model: the adapter is for another model (more "
                        "layers?) or other targets.", "{file}：{key} 在这个模型里没有对应的投影：适配器属于别的模型"
                        "（层数更多？）或别的 targets。", file=file, key=next(iter(keys.values())))
    tensors = {short: W[key] for short, key in _names(W, file).items()}   # read (and checked finite) now
    if not present:                                              # everything checked and read: now the model changes
        add_lora(model, r, alpha, config["target_modules"])
    with torch.no_grad():
        for name, m in adapters(model).items():
            m.alpha, m.scaling = alpha, alpha / r
            m.lora_A.weight.copy_(tensors[f"{name}.lora_A"])
            m.lora_B.weight.copy_(tensors[f"{name}.lora_B"])
    return model


# ---------------------------------------------------------------------------- merging
@torch.no_grad()
def merge(model):
    """Fold each adapter into its base, W' = W + (alpha / r) B A (in fp32, then rounded once to W's dtype),
    and put the plain Linear back: the state dict has the checkpoint's names again, and a forward costs
    what the base model's does. Returns the model."""
    for name, m in adapters(model).items():
        base = m.base_layer
        delta = m.lora_B.weight.float() @ m.lora_A.weight.float()             # (out, r) @ (r, in) -> (out, in)
        merged = (base.weight.float() + m.scaling * delta).to(base.weight.dtype)
        base.weight = nn.Parameter(merged, requires_grad=False)                # a new tensor: a mapped file stays as it is
        _swap(model, name, base)
    return model
