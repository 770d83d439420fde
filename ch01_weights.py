# %% [markdown]
# # Chapter 1 · What is in the checkpoint / 第 1 章 · 检查点里有什么
#
# Before writing any part of the model, open the box it ships in: the files, the
# safetensors header (read by hand, then by `qwen.weights`), the config's numbers, every
# tensor grouped by what it is for, the two dtypes, the 3 : 1 layer pattern, and what bf16
# can and cannot hold.
#
# 动手写模型的任何部件之前，先打开它的包装：文件、safetensors 文件头（先手工读，再用
# `qwen.weights` 读）、配置里的数字、按用途分组的所有张量、两种数据类型、3 : 1 的层排布，
# 以及 bf16 能表示什么、不能表示什么。
#
# Run: `python ch01_weights.py [--model PATH] [--tiny] [--lang zh]`

# %%
import json
from collections import defaultdict

import torch

from qwen.cli import chapter, count, size
from qwen.lang import tr

ch = chapter("Chapter 1: what is in the checkpoint", "第 1 章：检查点里有什么")
path, cfg, W = ch.path, ch.cfg, ch.W     # W reads the headers only: no tensor data yet


def title(en, zh):
    print("\n" + tr(en, zh))
    print("-" * 78)


# %% [markdown]
# ## 1. The folder / 文件夹

# %%
title("1. The files in the model folder", "1. 模型文件夹里的文件")
print(tr("  {path}", "  {path}", path=path))
for f in sorted(path.iterdir()):
    if f.is_file():
        print(f"  {f.name:<48} {size(f.stat().st_size):>10}")
print(tr("  config.json fixes every shape; the .safetensors file(s) hold the numbers; the index says\n"
        "  which file holds which tensor; tokenizer files turn text into ids (chapter 2).",
        "  config.json 决定所有形状；.safetensors 文件存数值；索引文件说明哪个张量在哪个文件里；\n"
        "  分词器文件把文字变成编号（第 2 章）。"))

# %% [markdown]
# ## 2. A safetensors header, by hand / 手工读 safetensors 文件头
# Layout: 8 bytes (little-endian length n), n bytes of JSON, then raw tensor bytes.

# %%
title("2. Reading a safetensors header by hand", "2. 手工读取 safetensors 文件头")
shard = W.info("norm.weight").file
with open(shard, "rb") as f:
    first8 = f.read(8)
    n = int.from_bytes(first8, "little")             # the header's length, little-endian u64
    raw = f.read(n)
header = json.loads(raw)                             # a JSON object: name -> dtype, shape, offsets
file_size = shard.stat().st_size
print(tr("  file: {name} ({size})", "  文件：{name}（{size}）", name=shard.name, size=size(file_size)))
print(tr("  first 8 bytes: {hex} -> header length n = {n:,} bytes (little-endian)",
        "  前 8 个字节：{hex} -> 文件头长度 n = {n:,} 字节（小端序）", hex=first8.hex(" "), n=n))
print(tr("  header entries: {k} tensors; __metadata__: {meta}",
        "  文件头条目：{k} 个张量；__metadata__：{meta}",
        k=len([k for k in header if k != "__metadata__"]), meta=header.get("__metadata__", tr("none", "无"))))
name = W.info("norm.weight").name
print(tr("  one entry, as stored:", "  其中一条，原样："))
print(f'    "{name}": {json.dumps(header[name])}')
begin, end = header[name]["data_offsets"]
info = W.info("norm.weight")
print(tr("  data starts after the header: byte 8 + n = {start:,}; so this tensor's bytes are at\n"
        "  {a:,} .. {b:,} of the file. qwen.weights says: offset {off:,}, {nb:,} bytes -> {ok}",
        "  数据紧跟在文件头之后：第 8 + n = {start:,} 字节；所以这个张量在文件的\n"
        "  {a:,} .. {b:,} 字节。qwen.weights 给出：偏移 {off:,}，{nb:,} 字节 -> {ok}",
        start=8 + n, a=8 + n + begin, b=8 + n + end, off=info.offset, nb=info.nbytes,
        ok=tr("same", "一致") if (info.offset, info.nbytes) == (8 + n + begin, end - begin) else tr("DIFFERENT", "不一致")))
print(tr("  The header JSON is padded with {pad} spaces so the data starts at a multiple of 8 bytes.",
        "  文件头 JSON 末尾补了 {pad} 个空格，使数据从 8 的整数倍字节处开始。",
        pad=len(raw) - len(raw.rstrip(b" "))))

# %% [markdown]
# ## 3. The config's numbers / 配置里的数字

# %%
title("3. The numbers in config.json", "3. config.json 里的数字")
nested = "text_config" in cfg.raw
print(tr("  layout: {how}", "  结构：{how}", how=tr("multimodal, language model under text_config", "多模态，语言模型的数字在 text_config 下")
                                              if nested else tr("flat, text-only", "扁平，纯文本模型")))
rows = [
    ("hidden_size", cfg.hidden_size, tr("width of every token's vector", "每个词元向量的宽度")),
    ("num_hidden_layers", cfg.num_hidden_layers, tr("decoder layers", "解码层数")),
    ("intermediate_size", cfg.intermediate_size, tr("MLP width", "MLP 的宽度")),
    ("num_attention_heads", cfg.num_attention_heads, tr("full attention: query heads", "全注意力：查询头数")),
    ("num_key_value_heads", cfg.num_key_value_heads, tr("full attention: key/value heads", "全注意力：键/值头数")),
    ("head_dim", cfg.head_dim, tr("per head; note {h} / {n} = {q}, not {d}", "每个头的维度；注意 {h} / {n} = {q}，不是 {d}",
                                 h=cfg.hidden_size, n=cfg.num_attention_heads,
                                 q=cfg.hidden_size // cfg.num_attention_heads, d=cfg.head_dim)),
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
    print(f"  {key:<24} {value!s:>10}   {why}")

# %% [markdown]
# ## 4. Every tensor, grouped / 所有张量，分组统计

# %%
title("4. The tensor inventory", "4. 张量清单")


def group(full):
    short = full.split("language_model.", 1)[-1]
    if full.startswith("model.visual."):
        return tr("vision tower (not used)", "视觉塔（本课程不用）")
    if full.startswith("mtp."):
        return tr("multi-token prediction (not used)", "多词元预测（本课程不用）")
    if short.split(".")[-2].endswith("norm"):      # input_layernorm, q_norm, linear_attn.norm, norm
        return tr("norms (chapter 3)", "归一化（第 3 章）")
    if "embed_tokens" in short or short.startswith("lm_head"):
        return tr("embedding (chapter 2)", "嵌入（第 2 章）")
    layer = int(short.split(".")[1])
    return (tr("linear-attention layers", "线性注意力层") if cfg.layer_types[layer] == "linear_attention"
            else tr("full-attention layers", "全注意力层"))


groups = defaultdict(lambda: [0, 0, 0])              # name -> [tensors, parameters, bytes]
for full in W.all_names:
    info = W.info(full)
    g = groups[group(full)]
    g[0] += 1
    g[1] += info.numel
    g[2] += info.nbytes
print(f"  {tr('group', '分组'):<36} {tr('tensors', '张量数'):>8} {tr('parameters', '参数量'):>12} {tr('bytes', '字节'):>10}")
for name, (k, p, b) in groups.items():
    print(f"  {name:<36} {k:>8} {count(p):>12} {size(b):>10}")
total = [sum(g[i] for g in groups.values()) for i in range(3)]
print(f"  {tr('total', '合计'):<36} {total[0]:>8} {count(total[1]):>12} {size(total[2]):>10}")
lm = sum(W.info(n).numel for n in W)
print(tr("  The language model the course builds: {k} tensors, {p:,} parameters.",
        "  本课程要搭的语言模型：{k} 个张量，{p:,} 个参数。", k=len(W), p=lm))

# %% [markdown]
# ## 5. Two dtypes / 两种数据类型

# %%
title("5. Dtypes: almost everything is bf16", "5. 数据类型：几乎全是 bf16")
by_dtype = defaultdict(list)
for full in W.all_names:
    by_dtype[W.info(full).dtype].append(full)
for dtype, names in sorted(by_dtype.items()):
    kinds = sorted({n.rsplit(".layers.", 1)[-1].split(".", 1)[-1] for n in names}) if dtype != "BF16" else []
    print(f"  {dtype:<5} {len(names):>4} {tr('tensors', '个张量')}" + (f"   {', '.join(kinds)}" if kinds else ""))
print(tr("  The fp32 ones sit in the linear-attention layers. A_log is exponentiated into each head's\n"
        "  decay rate, which multiplies the memory once per token: a rounding error there compounds\n"
        "  over thousands of tokens, so the authors keep it (and the gated norm's weight) in fp32\n"
        "  (config: mamba_ssm_dtype = float32). The loader keeps every tensor as stored.",
        "  fp32 的张量都在线性注意力层里。A_log 取指数后成为每个头的衰减率，每个词元都要乘一次记忆：\n"
        "  这里的舍入误差会在成千上万个词元上累积，所以作者把它（以及带门归一化的权重）存成 fp32\n"
        "  （配置里 mamba_ssm_dtype = float32）。加载器保持每个张量存储时的类型。"))

# %% [markdown]
# ## 6. The 3 : 1 layer pattern / 3 : 1 的层排布

# %%
title("6. Three linear-attention layers, then one full-attention layer", "6. 三层线性注意力，接一层全注意力")
strip = " ".join("F" if t == "full_attention" else "L" for t in cfg.layer_types)
print("  " + strip)
print(tr("  L = linear attention ({nl} layers: {li}...)\n  F = full attention ({nf} layers: {fi})",
        "  L = 线性注意力（{nl} 层：{li}...）\n  F = 全注意力（{nf} 层：{fi}）",
        nl=len(cfg.linear_attention_layers), li=", ".join(map(str, cfg.linear_attention_layers[:4])),
        nf=len(cfg.full_attention_layers), fi=", ".join(map(str, cfg.full_attention_layers))))
la = sum(W.info(n).numel for n in W if n.startswith(f"layers.{cfg.linear_attention_layers[0]}.linear_attn."))
fa = sum(W.info(n).numel for n in W if n.startswith(f"layers.{cfg.full_attention_layers[0]}.self_attn."))
print(tr("  parameters of one linear-attention block: {la}; of one full-attention block: {fa}",
        "  一个线性注意力块的参数：{la}；一个全注意力块的参数：{fa}", la=count(la), fa=count(fa)))

# %% [markdown]
# ## 7. Memory / 内存

# %%
title("7. Memory: bf16 against fp32", "7. 内存：bf16 与 fp32")
embed = W.info("embed_tokens.weight").numel
print(tr("  language model in bf16: {a}; in fp32: {b} (twice as much)", "  语言模型用 bf16：{a}；用 fp32：{b}（两倍）",
        a=size(2 * lm), b=size(4 * lm)))
print(tr("  the embedding table alone: {e} parameters = {p:.0%} of the language model, {s} in bf16",
        "  仅嵌入表就有 {e} 个参数 = 语言模型的 {p:.0%}，bf16 下 {s}", e=count(embed), p=embed / lm, s=size(2 * embed)))
print(tr("  This script has not read it: W maps the file into memory and reads a tensor's pages\n"
        "  only when they are touched.", "  本脚本并没有读取它：W 把文件映射进内存，只有真正访问时才读取相应的页。"))

# %% [markdown]
# ## 8. Real values, and what bf16 can hold / 真实的数值，以及 bf16 能存什么

# %%
title("8. A few stored values, and the limits of bf16", "8. 几个存储的数值，以及 bf16 的极限")
w = W["layers.0.input_layernorm.weight"]
print(tr("  layers.0.input_layernorm.weight[:6] = {v}  ({dt}, stored as w - 1: chapter 3)",
        "  layers.0.input_layernorm.weight[:6] = {v}（{dt}，存的是 w - 1：见第 3 章）",
        v=[round(x, 4) for x in w[:6].float().tolist()], dt=w.dtype))
row = W.rows("embed_tokens.weight", [9419])[0]      # one row, 2 KB, read from the file
print(tr("  embed_tokens.weight[9419][:6] = {v}  (the row of the token 'Hello')",
        "  embed_tokens.weight[9419][:6] = {v}（词元 'Hello' 的那一行）",
        v=[round(x, 4) for x in row[:6].float().tolist()]))
x = w[0]
bits = x.view(torch.int16).item() & 0xFFFF
b = f"{bits:016b}"
print(tr("  {x} in bf16 bits: sign {s} | exponent {e} | mantissa {m}  (1 + 8 + 7 bits)",
        "  {x} 的 bf16 位：符号 {s} | 指数 {e} | 尾数 {m}（1 + 8 + 7 位）",
        x=f"{x.item():+.6f}", s=b[0], e=b[1:9], m=b[9:]))
fi = torch.finfo(torch.bfloat16)
print(tr("  bf16 keeps fp32's range (largest {mx:.2e}) but only 8 significant bits (about 3 digits):",
        "  bf16 保留了 fp32 的范围（最大 {mx:.2e}），但只有 8 位有效二进制位（约 3 位十进制）：", mx=fi.max))
for v in (1.0, 256.0):
    spacing = (torch.tensor(v, dtype=torch.bfloat16).float() * fi.eps).item()
    print(tr("    near {v:g} the next bf16 number is {s:g} away", "    在 {v:g} 附近，相邻 bf16 数相差 {s:g}", v=v, s=spacing))
for v in (1.001, 257.0, 0.1):
    print(tr("    {v!r:>6} stored in bf16 becomes {b!r}", "    {v!r:>6} 存成 bf16 后变成 {b!r}",
            v=v, b=torch.tensor(v).bfloat16().item()))
print(tr("  That is why computations in this course upcast to fp32 for statistics and why the\n"
        "  norms store w - 1 (small numbers near 0 are stored much more finely than near 1).",
        "  所以本课程计算统计量时先转成 fp32，归一化层也因此存 w - 1（0 附近的小数比 1 附近存得精细得多）。"))
print("\n" + tr("Exercises for this chapter: 201, 202. Try one: python practice/judge.py 201",
                "本章练习：201, 202。试一个：python practice/judge.py 201"))
