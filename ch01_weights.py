# %% [markdown]
# # Chapter 1 · What is in the checkpoint / 第 1 章 · 检查点里有什么
#
# Before writing any part of the model, open the box it ships in: the files, one safetensors
# header read by hand, the config's numbers, every tensor grouped by what it is for, the two
# dtypes, the 3 : 1 layer pattern, and what bf16 can and cannot hold.
#
# 动手写模型的任何部件之前，先打开它的包装：文件、手工读出的 safetensors 文件头、配置里的数字、
# 按用途分组的所有张量、两种数据类型、3 : 1 的层排布，以及 bf16 能存什么、不能存什么。
#
# Run: `python ch01_weights.py [--model PATH] [--tiny] [--lang zh]` (notebook: `QWEN_TINY=1`, `QWEN_LANG=zh`)

# %%
import json
import math
import re

import torch

import qwen.weights
from engine.cli import chapter, count, pad, say, section, show_code, size
from engine.known import real_inventory
from qwen.lang import tr
from qwen.config import Config
from qwen.weights import short_name

ch = chapter("Chapter 1: what is in the checkpoint", "第 1 章：检查点里有什么")


# %% [markdown]
# ## The code / 代码
# What this chapter is about, the header reader and the lazy mapping: `qwen/weights.py`, the whole file, read from the
# module itself (never a second copy): shown in a notebook, printed with `--code`, else where it is.
#
# 本章讲的东西：文件头的读取和按需读取的映射：`qwen/weights.py` 的完整文件，直接从模块读出（不是另一份拷贝）：
# notebook 里直接显示，`--code` 打印，否则只说它在哪里。

# %%
taught = show_code(ch, qwen.weights)
cfg, W = ch.cfg, ch.W                          # W has read the headers only: no tensor data yet
REAL = real_inventory() if ch.tiny else None   # Qwen3.5-0.8B's published inventory, shown next to tiny figures


def real(en, zh, **fields):
    """A line with what Qwen3.5-0.8B shows, printed only under a tiny-checkpoint figure."""
    if REAL:
        say("  Qwen3.5-0.8B: " + en, "  Qwen3.5-0.8B：" + zh, **fields)


# %% [markdown]
# ## 1. The folder / 文件夹
# `config.json` fixes every shape; the `.safetensors` file(s) hold the numbers; the index
# (`model.safetensors.index.json`) says which file holds which tensor; the tokenizer files turn
# text into ids (chapter 2). The real checkpoint also ships a chat template and the vision
# preprocessor's settings.
#
# `config.json` 决定所有形状；`.safetensors` 文件存数值；索引文件说明哪个张量在哪个文件里；
# 分词器文件把文字变成编号（第 2 章）。真实检查点还带有对话模板和视觉预处理的设置。

# %%
section(1, "The files in the model folder", "模型文件夹里的文件")
say("  {p}", "  {p}", p=ch.path)
files = sorted(f for f in ch.path.iterdir() if f.is_file())
for f in files:
    name, nbytes = pad(f.name, 48), size(f.stat().st_size)
    say("  {n} {s:>10}", "  {n} {s:>10}", n=name, s=nbytes)
n_files, all_bytes = len(files), size(sum(f.stat().st_size for f in files))
say("  {k} files, {s} in all", "  共 {k} 个文件，{s}", k=n_files, s=all_bytes)
if REAL:
    weights_file = max(REAL["files"], key=lambda f: f["size"])
    real_files, real_bytes = len(REAL["files"]), size(sum(f["size"] for f in REAL["files"]))
    weights_name, weights_bytes = weights_file["name"], size(weights_file["size"])
    real("{k} files, {s}; the weights: {w} ({ws})", "{k} 个文件，{s}；权重：{w}（{ws}）",
         k=real_files, s=real_bytes, w=weights_name, ws=weights_bytes)


# %% [markdown]
# ## 2. A safetensors header, by hand / 手工读 safetensors 文件头
# Layout: 8 bytes (a little-endian integer n), n bytes of JSON (name -> dtype, shape, byte
# offsets), then the raw tensor bytes. `qwen.weights` reads it the same way; we check that both
# agree on where one tensor's bytes are.
#
# 布局：8 个字节（小端序整数 n），n 个字节的 JSON（名字 -> 数据类型、形状、字节偏移），然后是
# 张量的原始字节。`qwen.weights` 也是这样读的；我们核对两者对同一个张量的位置是否一致。

# %%
section(2, "Reading a safetensors header by hand", "手工读取 safetensors 文件头")
info = W.info("norm.weight")
with open(info.file, "rb") as f:
    first8 = f.read(8)
    n = int.from_bytes(first8, "little")             # the header's length, little-endian u64
    raw = f.read(n)
header = json.loads(raw)                             # name -> {"dtype", "shape", "data_offsets"}
begin, end = header[info.name]["data_offsets"]       # relative to the first byte after the header
start, stop = 8 + n + begin, 8 + n + end             # where the tensor's bytes are in the file
same = (info.offset, info.nbytes) == (start, stop - start)
verdict = tr("same", "一致") if same else tr("DIFFERENT", "不一致")
first8_hex, entries = first8.hex(" "), sum(key != "__metadata__" for key in header)
metadata = header.get("__metadata__", tr("none", "无"))
entry = json.dumps(header[info.name])
padding = len(raw) - len(raw.rstrip(b" "))
say("  file: {f}", "  文件：{f}", f=info.file.name)
say("  first 8 bytes: {h} -> header length n = {n:,} bytes", "  前 8 个字节：{h} -> 文件头长度 n = {n:,} 字节",
    h=first8_hex, n=n)
say("  entries: {k} tensors; __metadata__: {m}", "  条目：{k} 个张量；__metadata__：{m}", k=entries, m=metadata)
say('  "{name}": {entry}', '  "{name}": {entry}', name=info.name, entry=entry)
say("  its bytes: {a:,} .. {b:,} of the file; qwen.weights says offset {o:,}, {k:,} bytes -> {ok}",
    "  它的字节：文件的第 {a:,} .. {b:,} 字节；qwen.weights 给出偏移 {o:,}、{k:,} 字节 -> {ok}",
    a=start, b=stop, o=info.offset, k=info.nbytes, ok=verdict)
say("  header padded with {p} spaces, so the data starts at a multiple of 8 bytes",
    "  文件头末尾补了 {p} 个空格，使数据从 8 的整数倍字节处开始", p=padding)
if REAL:
    st = REAL["safetensors"]
    real_n = st["header_json_bytes"] + st["header_padding_bytes"]
    real("{k} entries, n = {n:,} bytes ({p} of them padding), no __metadata__",
         "{k} 个条目，n = {n:,} 字节（其中 {p} 个是填充），没有 __metadata__",
         k=st["tensor_count"], n=real_n, p=st["header_padding_bytes"])


# %% [markdown]
# ## 3. The config's numbers / 配置里的数字
# The released checkpoint is multimodal: the language model's numbers sit under `text_config`.
# A text-only export puts the same keys at the top level; `Config` reads both.
#
# 发布的检查点是多模态的：语言模型的数字在 `text_config` 下。纯文本导出把同样的键放在顶层；
# `Config` 两种都能读。

# %%
section(3, "The numbers in config.json", "config.json 里的数字")
layout = tr("multimodal, language model under text_config", "多模态，语言模型的数字在 text_config 下") \
    if "text_config" in cfg.raw else tr("flat, text-only", "扁平，纯文本模型")
say("  layout: {how}", "  结构：{how}", how=layout)
split = cfg.hidden_size // cfg.num_attention_heads
rows = [
    ("hidden_size", cfg.hidden_size, tr("hidden size: width of every token's vector", "隐藏维度：每个词元向量的宽度")),
    ("num_hidden_layers", cfg.num_hidden_layers, tr("decoder layers", "解码层数")),
    ("intermediate_size", cfg.intermediate_size, tr("MLP width", "MLP 的宽度")),
    ("num_attention_heads", cfg.num_attention_heads, tr("full attention: query heads", "全注意力：查询头数")),
    ("num_key_value_heads", cfg.num_key_value_heads, tr("full attention: key/value heads", "全注意力：键/值头数")),
    ("head_dim", cfg.head_dim, tr("per head, set on its own (hidden_size / heads = {q})", "每个头的维度，单独设定（hidden_size / 头数 = {q}）", q=split)
     if cfg.head_dim != split else tr("per head (= hidden_size / heads)", "每个头的维度（= hidden_size / 头数）")),
    ("linear_num_key_heads", cfg.linear_num_key_heads, tr("linear attention: key heads", "线性注意力：键头数")),
    ("linear_num_value_heads", cfg.linear_num_value_heads, tr("linear attention: value heads", "线性注意力：值头数")),
    ("linear_key_head_dim", cfg.linear_key_head_dim, tr("linear attention: key head size", "线性注意力：键头维度")),
    ("linear_value_head_dim", cfg.linear_value_head_dim, tr("linear attention: value head size", "线性注意力：值头维度")),
    ("linear_conv_kernel_dim", cfg.linear_conv_kernel_dim, tr("causal conv width", "因果卷积的宽度")),
    ("rms_norm_eps", cfg.rms_norm_eps, tr("added inside every RMSNorm's root (chapter 3)", "每个 RMSNorm 根号里加的小数（第 3 章）")),
    ("vocab_size", cfg.vocab_size, tr("rows of the embedding table", "嵌入表的行数")),
    ("tie_word_embeddings", cfg.tie_word_embeddings, tr("output layer = embedding table", "输出层就是嵌入表")),
]
for key, value, why in rows:
    key, value = pad(key, 24), str(value)
    say("  {k} {v:>10}   {w}", "  {k} {v:>10}   {w}", k=key, v=value, w=why)
if REAL:
    rc = Config.from_dict(REAL["config"])
    tied_zh = "共享嵌入" if rc.tie_word_embeddings else "不共享嵌入"
    real("hidden_size {h}, {L} layers, head_dim {d}, vocab_size {v:,}, tied {t}",
         "hidden_size {h}，{L} 层，head_dim {d}，vocab_size {v:,}，{tz}",
         h=rc.hidden_size, L=rc.num_hidden_layers, d=rc.head_dim, v=rc.vocab_size, t=rc.tie_word_embeddings, tz=tied_zh)


# %% [markdown]
# ## 4. Every tensor, grouped / 所有张量，分组统计
# Groups come from the loader's short names (`layers.3.self_attn.q_proj.weight`, whatever the
# prefix in the file); a tensor the course does not know (a saved rotary buffer, a layer beyond
# the config) lands in "other". The vision tower (`model.visual.*`, the model's eyes) is built
# in chapter 10 and reads an image in chapter 11; the multi-token-prediction head (`mtp.*`)
# drafts tokens for speculative decoding in chapter 12.
#
# 分组依据加载器的短名字（无论文件里的前缀是什么，都是 `layers.3.self_attn.q_proj.weight` 这样）；
# 课程不认识的张量（存下来的旋转位置缓冲、超出配置的层）归入“其他”。视觉塔（`model.visual.*`，
# 模型的眼睛）在第 10 章搭建，第 11 章用它读图像；多词元预测头（`mtp.*`）在第 12 章为推测解码起草词元。

# %%
def group(full, cfg):
    short = short_name(full)
    if short is None:
        return tr("vision tower (used in chapter 10)", "视觉塔（第 10 章用到）") if full.startswith("model.visual.") \
            else tr("multi-token prediction (chapter 12)", "多词元预测（第 12 章）")
    layer = re.match(r"layers\.(\d+)\.", short)
    if layer and int(layer[1]) >= cfg.num_hidden_layers:                       # a layer beyond the config
        return tr("other (not used)", "其他（不用）")
    if re.fullmatch(r"(layers\.\d+\.)?([\w.]+\.)?\w*norm\.weight", short):     # input_layernorm, q_norm, linear_attn.norm, norm
        return tr("norms (chapter 3)", "归一化（第 3 章）")
    if short in ("embed_tokens.weight", "lm_head.weight"):
        return tr("embedding and output (chapter 2)", "嵌入与输出（第 2 章）")
    layer = re.match(r"layers\.(\d+)\.(linear_attn|self_attn|mlp)\.", short)
    if layer:
        return tr("linear-attention layers (with MLPs)", "线性注意力层（含 MLP）") if cfg.layer_types[int(layer[1])] == "linear_attention" \
            else tr("full-attention layers (with MLPs)", "全注意力层（含 MLP）")
    return tr("other (not used)", "其他（不用）")


def inventory(tensors, cfg):
    """{group: [tensors, parameters, bytes]} from (full name, numel, nbytes) triples."""
    groups = {}
    for full, numel, nbytes in tensors:
        g = groups.setdefault(group(full, cfg), [0, 0, 0])
        g[0], g[1], g[2] = g[0] + 1, g[1] + numel, g[2] + nbytes
    return groups


def show(groups):
    """The inventory as a table: one row per group, the largest first."""
    g, t = pad(tr("group", "分组"), 36), pad(tr("tensors", "张量数"), 8, right=True)
    p, b = pad(tr("parameters", "参数量"), 12, right=True), pad(tr("bytes", "字节"), 10, right=True)
    say("  {g} {t} {p} {b}", "  {g} {t} {p} {b}", g=g, t=t, p=p, b=b)
    for name, (k, params, nbytes) in sorted(groups.items(), key=lambda item: -item[1][1]):
        name, params, nbytes = pad(name, 36), count(params), size(nbytes)
        say("  {g} {k:>8} {p:>12} {b:>10}", "  {g} {k:>8} {p:>12} {b:>10}", g=name, k=k, p=params, b=nbytes)


section(4, "The tensor inventory", "张量清单")
show(inventory(((f, W.info(f).numel, W.info(f).nbytes) for f in W.all_names), cfg))
n_tensors, lm = len(W), sum(W.info(name).numel for name in W)
say("  the language model the course builds: {k} tensors, {p:,} parameters",
    "  本课程要搭的语言模型：{k} 个张量，{p:,} 个参数", k=n_tensors, p=lm)
if REAL:
    say("  Qwen3.5-0.8B (its published inventory):", "  Qwen3.5-0.8B（公开的张量清单）：")
    nbytes = {"BF16": 2, "F32": 4}
    show(inventory(((f, math.prod(t["shape"]), math.prod(t["shape"]) * nbytes[t["dtype"]])
                    for f, t in REAL["tensors"].items()), Config.from_dict(REAL["config"])))


# %% [markdown]
# ## 5. Two dtypes / 两种数据类型
# The released checkpoint stores almost everything in bf16. The exceptions (known from the
# file's exact size and from loaders checked against the file) sit in the linear-attention
# layers: `A_log` (exponentiated into each head's decay rate) and the gated norm's weight are
# fp32, and the config says `mamba_ssm_dtype: float32`. Our reading (the authors do not say
# why): the decay multiplies the memory once per token, so a rounding error there compounds
# over thousands of tokens. A checkpoint re-saved in one dtype (a fine-tune exported as
# all-bf16, or all-fp32) has one group only; the loader keeps every tensor as stored.
#
# 发布的检查点几乎全部存成 bf16。例外（由文件的精确大小和对照过该文件的加载器得知）都在
# 线性注意力层里：`A_log`（取指数后成为每个头的衰减率）和带门归一化的权重是 fp32，配置里也写着
# `mamba_ssm_dtype: float32`。我们的推测（作者没有说明原因）：衰减每个词元都要乘一次记忆，
# 这里的舍入误差会在成千上万个词元上累积。整体另存为一种类型的检查点（比如全 bf16 或全 fp32
# 导出的微调模型）只有一组；加载器保持每个张量存储时的类型。

# %%
section(5, "Dtypes", "数据类型")
by_dtype = {}
for full in W.all_names:
    by_dtype.setdefault(W.info(full).dtype, []).append(full)
for dtype, names in sorted(by_dtype.items(), key=lambda item: -len(item[1])):
    few = len(by_dtype) > 1 and len(names) < len(W.all_names) / 4           # name the kinds of a small group
    kinds = sorted({re.sub(r"^.*?layers\.\d+\.", "", n) for n in names}) if few else []
    k, kinds = len(names), ("   " + tr(", ", "、").join(kinds)) if kinds else ""
    say("  {dt:<5} {k:>4} tensors{kinds}", "  {dt:<5} {k:>4} 个张量{kinds}", dt=dtype, k=k, kinds=kinds)


# %% [markdown]
# ## 6. The 3 : 1 layer pattern / 3 : 1 的层排布
# Three linear-attention layers (chapter 7), then one full-attention layer (chapter 6), repeated.
#
# 三层线性注意力（第 7 章），接一层全注意力（第 6 章），如此重复。

# %%
section(6, "Linear-attention and full-attention layers", "线性注意力层与全注意力层")
pattern = " ".join("F" if t == "full_attention" else "L" for t in cfg.layer_types)
say("  {s}", "  {s}", s=pattern)
nl, nf = len(cfg.linear_attention_layers), len(cfg.full_attention_layers)
where = tr(", ", "、").join(map(str, cfg.full_attention_layers))
say("  L = linear attention: {n} layer{s}", "  L = 线性注意力：{n} 层", n=nl, s="" if nl == 1 else "s")
say("  F = full attention: {n} layer{s} ({i})", "  F = 全注意力：{n} 层（{i}）", n=nf, s="" if nf == 1 else "s", i=where)
for kind, layers, en, zh in (("linear_attn", cfg.linear_attention_layers, "one linear-attention block", "一个线性注意力块"),
                             ("self_attn", cfg.full_attention_layers, "one full-attention block", "一个全注意力块")):
    if layers:
        block = count(sum(W.info(k).numel for k in W.names_under(f"layers.{layers[0]}.{kind}.")))
        say("  parameters of " + en + ": {p}", "  " + zh + "的参数：{p}", p=block)


# %% [markdown]
# ## 7. Memory / 内存
# `W` maps the file into memory: a tensor's pages are read only when something touches them.
#
# `W` 对文件做内存映射：只有真正访问某个张量时，才读取它所在的页。

# %%
section(7, "Memory: bf16 against fp32", "内存：bf16 与 fp32")
embed = W.info("embed_tokens.weight").numel
in_bf16, in_fp32, embed_count, embed_share = size(2 * lm), size(4 * lm), count(embed), embed / lm
say("  language model in bf16: {a}; in fp32: {b}", "  语言模型用 bf16：{a}；用 fp32：{b}", a=in_bf16, b=in_fp32)
say("  the embedding table: {e} parameters = {p:.0%} of the language model",
    "  嵌入表：{e} 个参数 = 语言模型的 {p:.0%}", e=embed_count, p=embed_share)
if REAL:
    lm_real = REAL["counts"]["params"]["language_model"]
    real_bf16, real_share = size(2 * lm_real), 248320 * 1024 / lm_real
    real("{a} in bf16; the embedding table is {p:.0%} of it", "bf16 下 {a}；嵌入表占 {p:.0%}", a=real_bf16, p=real_share)


# %% [markdown]
# ## 8. What bf16 can hold / bf16 能存什么
# bf16 is fp32 with the last 16 bits cut off: 1 sign bit, the same 8 exponent bits (so the same
# range), 7 stored mantissa bits (8 significant bits with the implicit leading 1, about
# 8 x log10(2) = 2.4 decimal digits). The gap between neighbours doubles at every power of two.
#
# The norms' weights (chapter 3) use this: the file stores `w`, and the norm multiplies by the
# scale `1 + w`. A fresh norm stores 0 (scale 1), where bf16 is fine-grained, not 1, where it is
# coarse.
#
# bf16 就是砍掉后 16 位的 fp32：1 个符号位、同样的 8 个指数位（所以范围相同）、7 个存储的尾数位
# （加上隐含的首位 1 共 8 个有效二进制位，约 8 x log10(2) = 2.4 位十进制）。每过一个 2 的幂，
# 相邻数的间隔就翻倍。归一化的权重（第 3 章）利用了这一点：文件存 `w`，归一化乘以缩放 `1 + w`。
# 新的归一化存 0（缩放为 1），那里 bf16 很精细；而不是存 1，那里很粗。

# %%
section(8, "A stored value, and the limits of bf16", "一个存储的数值，以及 bf16 的极限")
w = W["layers.0.input_layernorm.weight"]
w4 = [round(x, 4) for x in w[:4].float().tolist()]
say("  layers.0.input_layernorm.weight[:4] = {v} ({dt}): the stored w; the scale applied is 1 + w",
    "  layers.0.input_layernorm.weight[:4] = {v}（{dt}）：存的是 w，实际乘的缩放是 1 + w", v=w4, dt=w.dtype)
x = w[0].bfloat16()
value, bits = x.item(), f"{x.view(torch.int16).item() & 0xFFFF:016b}"
sign, exponent, mantissa = bits[0], bits[1:9], bits[9:]
say("  {x:+.6f} in bf16 bits: sign {s} | exponent {e} | mantissa {m}", "  {x:+.6f} 的 bf16 位：符号 {s} | 指数 {e} | 尾数 {m}",
    x=value, s=sign, e=exponent, m=mantissa)
word = "Hello"
vocab_file = next((ch.path / f for f in ("vocab.json", "tokenizer.json") if (ch.path / f).is_file()), None)
found = vocab_file and re.search(r'"%s":\s*(\d+)' % word, vocab_file.read_text(encoding="utf-8"))   # a text search:
if not found or int(found[1]) >= W.info("embed_tokens.weight").shape[0]:                      # chapter 2 builds the
    say("  (no tokenizer files with {w!r} here: the example token row is skipped)",            # whole tokenizer
        "  （这里没有含 {w!r} 的分词器文件：跳过示例词元的那一行）", w=word)
else:
    word_id = int(found[1])
    row = W.rows("embed_tokens.weight", [word_id])[0]                # one row, read from the file
    row4 = [round(v, 4) for v in row[:4].float().tolist()]
    say("  embed_tokens.weight[{i}][:4] = {v} (the row of the token {w!r}, id from {f})",
        "  embed_tokens.weight[{i}][:4] = {v}（词元 {w!r} 的那一行，编号来自 {f}）", i=word_id, w=word,
        f=vocab_file.name, v=row4)
one = torch.tensor(1.0, dtype=torch.bfloat16)
up = (torch.nextafter(one, torch.tensor(2.0, dtype=torch.bfloat16)) - one).item()
down = (one - torch.nextafter(one, torch.tensor(0.0, dtype=torch.bfloat16))).item()
largest, digits = torch.finfo(torch.bfloat16).max, 8 * math.log10(2)
say("  bf16 keeps fp32's range (largest {mx:.2e}), with 8 significant bits (about {d:.1f} decimal digits)",
    "  bf16 保留了 fp32 的范围（最大 {mx:.2e}），有效位 8 个二进制位（约 {d:.1f} 位十进制）", mx=largest, d=digits)
up_log, down_log = int(math.log2(up)), int(math.log2(down))
say("  gap above 1: {u:g} (2^{a}); below 1: {d:g} (2^{b})", "  1 之上的间隔：{u:g}（2^{a}）；1 之下：{d:g}（2^{b}）",
    u=up, a=up_log, d=down, b=down_log)
for v in (1.001, 257.0, 0.001):
    stored = torch.tensor(v).bfloat16().item()
    say("  {v!r:>6} stored in bf16 becomes {b!r}", "  {v!r:>6} 存成 bf16 后变成 {b!r}", v=v, b=stored)


# %% [markdown]
# ## How to explain it / 怎么讲给别人听
# A checkpoint is a config (the shapes) plus named tensors (the numbers). safetensors is the
# simplest possible container: a length, a JSON table of contents, raw bytes; so a loader can
# map it and read only what it touches. Qwen3.5-0.8B is 0.75 B language-model parameters in
# bf16, a third of them in the embedding table, in 24 layers, three linear-attention layers for
# every full-attention one.
#
# 检查点 = 配置（形状）+ 有名字的张量（数值）。safetensors 是最简单的容器：一个长度、一张 JSON 目录、
# 原始字节；所以加载器可以对它做内存映射，只读用到的部分。Qwen3.5-0.8B 的语言模型有 0.75 B 个 bf16
# 参数，三分之一在嵌入表里，共 24 层，每三层线性注意力接一层全注意力。
#
# ## Summary / 小结
# - safetensors = 8-byte length + JSON header + raw bytes; `qwen.weights` reads it lazily.
# - Group tensors by the loader's short names; the vision tower is chapters 10-11's, the MTP head chapter 12's.
# - bf16 everywhere except two fp32 tensors per linear-attention layer; 8 significant bits.
#
# - safetensors = 8 字节长度 + JSON 文件头 + 原始字节；`qwen.weights` 按需读取。
# - 按加载器的短名字给张量分组；视觉塔在第 10、11 章用到，多词元预测头在第 12 章用到。
# - 除每个线性注意力层的两个 fp32 张量外都是 bf16；有效位 8 个二进制位。

# %%
say("\nExercises for this chapter: 201, 202. Try one: python practice/judge.py 201",
    "\n本章练习：201、202。试一个：python practice/judge.py 201")
