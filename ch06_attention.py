# %% [markdown]
# # Chapter 6 · Full attention with an output gate / 第 6 章 · 带输出门的全注意力
#
# Attention is where tokens read from each other: each token asks a query, every earlier token
# offers a key and a value, and the token takes the values weighted by softmax(query . key).
# Every 4th layer of Qwen3.5 is a full-attention layer (the other three are linear attention,
# chapter 7). This chapter runs one of them by hand on its real weights, step by step: the
# projections (q_proj is twice as wide: a query and a gate per head), q/k norms per head, RoPE
# (chapter 4), grouped-query attention and the memory it saves, the causal mask, the softmax in
# fp32, the attention pattern of a sentence, the output gate, and `F.scaled_dot_product_attention`
# doing the same in one call (`qwen/attention.py`).
#
# 注意力是词元彼此读取信息的地方：每个词元提出一个查询，之前的每个词元提供一个键和一个值，
# 词元按 softmax(查询 . 键) 加权取值。Qwen3.5 每 4 层有一层全注意力（另外三层是线性注意力，
# 第 7 章）。本章在真实权重上一步步手算其中一层：投影（q_proj 宽一倍：每个头一个查询和一个门）、
# 每个头的 q/k 归一化、RoPE（第 4 章）、分组查询注意力及其节省的内存、因果掩码、fp32 中的
# softmax、一个句子的注意力模式、输出门，以及用 `F.scaled_dot_product_attention` 一次调用得到
# 同样的结果（`qwen/attention.py`）。
#
# Run: `python ch06_attention.py [--model PATH] [--tiny] [--lang zh] [--plot]`

# %%
import math

import torch
import torch.nn.functional as F

import qwen.attention
from qwen.cache import LayerCache
from engine.cli import chapter, say, section, show_code, size
from engine.known import real_inventory
from qwen.attention import Attention
from qwen.lang import tr
from qwen.norm import RMSNorm
from qwen.rope import RotaryEmbedding, apply_rope
from qwen.config import Config
from qwen.weights import load

ch = chapter("Chapter 6: full attention with an output gate", "第 6 章：带输出门的全注意力", plot=True)


# %% [markdown]
# ## The code / 代码
# What this chapter is about, the gated full attention and its causal core: `qwen/attention.py`, the whole file, read from the
# module itself (never a second copy): shown in a notebook, printed with `--code`, else where it is.
#
# 本章讲的东西：带门的全注意力及其因果核心：`qwen/attention.py` 的完整文件，直接从模块读出（不是另一份拷贝）：
# notebook 里直接显示，`--code` 打印，否则只说它在哪里。

# %%
taught = show_code(ch, qwen.attention)
cfg, W = ch.cfg, ch.W
L = cfg.full_attention_layers[0]                      # the first full-attention layer
NH, KV, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
G = NH // KV                                          # query heads per kv head
inventory = real_inventory()                          # Qwen3.5-0.8B's published config, for the lines after tiny figures
REAL = Config.from_dict(inventory["config"]) if inventory else None
SENTENCE = "The cat sat on the mat because it was tired."
ids, names = ch.sentence(SENTENCE)                    # token ids and their readable pieces
T = len(ids)


# %% [markdown]
# ## 1. The projections and their shapes / 投影及其形状
# q_proj has, per head, head_dim query rows followed by head_dim gate rows; k_proj and v_proj have
# one block of head_dim rows per kv head; o_proj maps the heads back to the hidden size.
# The input here is the sentence's embeddings through this layer's input norm. The real input is
# the residual stream after the layers before it, which include linear attention (chapter 7);
# chapter 8 shows the real patterns. Computed in fp32 here, so that every step can be compared
# exactly. The checkpoint stores bf16; with bf16 weights the module runs the projections in bf16
# and the attention itself (scores, softmax, weighted values) in fp32 (see qwen/attention.py).
#
# q_proj 每个头先有 head_dim 行查询，再有 head_dim 行门；k_proj 和 v_proj 每个键值头一块 head_dim 行；
# o_proj 把各头映射回隐藏维度。这里的输入是句子的嵌入经过本层的输入归一化。真实的输入是前面
# 各层之后的残差流，其中包括线性注意力（第 7 章）；第 8 章展示真实的注意力模式。这里用 fp32 计算，
# 以便逐步精确比较。检查点以 bf16 存储；权重是 bf16 时，模块用 bf16 做投影，而注意力本身（分数、
# softmax、加权求和）用 fp32 计算（见 qwen/attention.py）。

# %%
section(1, "The projections and their shapes", "投影及其形状")
attn = load(Attention(cfg), W, f"layers.{L}.self_attn.").float()
norm = load(RMSNorm(cfg.hidden_size, cfg.rms_norm_eps), W, f"layers.{L}.input_layernorm.")
x = norm(W.rows("embed_tokens.weight", ids)).float()[None]                     # (1, T, hidden)
for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
    shape = list(W.shape(f"layers.{L}.self_attn.{name}.weight"))
    say("  layers.{l}.self_attn.{n}.weight  {s}", "  layers.{l}.self_attn.{n}.weight  {s}", l=L, n=name, s=shape)
q_rows, k_rows = 2 * NH * D, KV * D
say("  q_proj rows = heads ({h}) x {d} x 2 (query, then gate) = {r}; k_proj rows = kv heads ({kv}) x {d} = {k}",
    "  q_proj 的行数 = 头数（{h}）x {d} x 2（先查询后门）= {r}；k_proj 的行数 = 键值头数（{kv}）x {d} = {k}",
    h=NH, d=D, r=q_rows, kv=KV, k=k_rows)
with torch.no_grad():
    q, gate = attn.q_proj(x).view(1, T, NH, 2, D).unbind(3)                     # (1, T, NH, D) each
    k = attn.k_proj(x).view(1, T, KV, D)                                         # (1, T, KV, D)
    v = attn.v_proj(x).view(1, T, KV, D)                                         # (1, T, KV, D)
shapes = [list(t.shape) for t in (q, gate, k, v)]
say("  {t} tokens: q {q}, gate {g}, k {k}, v {v}   (batch, tokens, heads, head_dim)",
    "  {t} 个词元：q {q}，gate {g}，k {k}，v {v}（批、词元、头、head_dim）",
    t=T, q=shapes[0], g=shapes[1], k=shapes[2], v=shapes[3])


# %% [markdown]
# ## 2. q_norm and k_norm, per head, before RoPE / 每个头的 q_norm 和 k_norm，在 RoPE 之前
# Each head's query and key is RMS-normalized over its head_dim entries (zero-centred weights,
# chapter 3). A score is then at most |q| |k| / sqrt(head_dim), whatever the input's size.
#
# 每个头的查询和键在各自的 head_dim 个数上做 RMS 归一化（零中心的权重，第 3 章）。
# 这样无论输入多大，分数最多是 |q| |k| / sqrt(head_dim)。

# %%
section(2, "q_norm and k_norm, per head, before RoPE", "每个头的 q_norm 和 k_norm，在 RoPE 之前")


def rms(t):
    return t.pow(2).mean(-1).sqrt()


with torch.no_grad():
    qn, kn = attn.q_norm(q), attn.k_norm(k)
    q_unit = RMSNorm(D, cfg.rms_norm_eps)(q)                                     # the same norm with a scale of 1
before_lo, before_hi, after_lo, after_hi = rms(q).min().item(), rms(q).max().item(), rms(qn).min().item(), rms(qn).max().item()
unit_rms = rms(q_unit).mean().item()
say("  RMS of each query head, over the tokens: before {a:.3f} .. {b:.3f}, after q_norm {c:.3f} .. {d:.3f}",
    "  各查询头的均方根（所有词元）：归一化前 {a:.3f} .. {b:.3f}，q_norm 之后 {c:.3f} .. {d:.3f}",
    a=before_lo, b=before_hi, c=after_lo, d=after_hi)
say("  with the scale 1 + w of q_norm set to 1, the heads' RMS would be {r:.3f}: the scale is what moves it",
    "  如果 q_norm 的缩放 1 + w 全是 1，各头的均方根会是 {r:.3f}：改变它的是缩放", r=unit_rms)


# %% [markdown]
# ## 3. RoPE, then grouped-query attention / 先 RoPE，再分组查询注意力
# RoPE turns queries and keys by their positions (chapter 4). Then the NH query heads share KV
# key/value heads: query head h reads kv head h // (NH / KV). Only KV heads of keys and values
# are computed and, during generation, kept: the "kv cache" (chapter 9).
#
# RoPE 按位置旋转查询和键（第 4 章）。之后 NH 个查询头共享 KV 个键值头：查询头 h 读键值头
# h // (NH / KV)。只需计算、并在生成时保存 KV 个头的键和值：这就是"键值缓存"（第 9 章）。

# %%
section(3, "RoPE, then grouped-query attention", "先 RoPE，再分组查询注意力")
cos, sin = RotaryEmbedding(cfg)(torch.arange(T))
qr = apply_rope(qn.transpose(1, 2), cos, sin)                                   # (1, NH, T, D)
kr = apply_rope(kn.transpose(1, 2), cos, sin)                                   # (1, KV, T, D)
vr = v.transpose(1, 2)                                                          # (1, KV, T, D)
readers = list(range(G))
say("  query heads: {nh}, kv heads: {kv}; query heads {a} read kv head 0",
    "  查询头 {nh} 个，键值头 {kv} 个；查询头 {a} 读键值头 0", nh=NH, kv=KV, a=readers)


def cache_bytes(tokens, layers, kv_heads, head_dim):
    return tokens * layers * 2 * kv_heads * head_dim * 2                        # k and v, bf16


def cache_lines(heads, kv_heads, head_dim, layers, prefix_en, prefix_zh):
    """The kv cache's size at three lengths: with the kv heads, and with one per query head."""
    prefix = tr(prefix_en, prefix_zh)
    for tokens in (1024, 32768, 262144):
        shared, own = size(cache_bytes(tokens, layers, kv_heads, head_dim)), size(cache_bytes(tokens, layers, heads, head_dim))
        say("  {p}kv cache for {t:>7,} tokens: {a:>9} with kv heads: {kv}; {b:>9} if each of the {h} query heads had its own",
            "  {p}{t:>7,} 个词元的键值缓存：{kv} 个键值头 {a:>9}；如果 {h} 个查询头各有自己的键值 {b:>9}",
            p=prefix, t=tokens, a=shared, b=own, kv=kv_heads, h=heads)


n_full = len(cfg.full_attention_layers)
say("  per token and full-attention layer: k and v, each kv heads ({kv}) x {d} x 2 bytes (bf16); full-attention layers: {n}",
    "  每个词元、每个全注意力层：k 和 v，各为键值头数（{kv}）x {d} x 2 字节（bf16）；全注意力层数：{n}",
    kv=KV, d=D, n=n_full)
say("  (linear-attention layers keep a state of fixed size instead: chapter 7)", "  （线性注意力层保存的是固定大小的状态：第 7 章）")
cache_lines(NH, KV, D, n_full, "", "")
if ch.tiny and REAL:
    cache_lines(REAL.num_attention_heads, REAL.num_key_value_heads, REAL.head_dim, len(REAL.full_attention_layers),
                "Qwen3.5-0.8B (config): ", "Qwen3.5-0.8B（配置）：")


# %% [markdown]
# ## 4. The causal mask and the softmax in fp32 / 因果掩码和 fp32 中的 softmax
# scores = q . k / sqrt(head_dim); a token may not read tokens after it, so those scores become
# -inf before the softmax and their weights exactly 0. The softmax runs in fp32 (exp of a bf16
# score would be coarse); each row then sums to 1.
#
# scores = q . k / sqrt(head_dim)；词元不能读取它之后的词元，所以这些分数在 softmax 之前设为 -inf，
# 权重正好是 0。softmax 在 fp32 中计算（对 bf16 的分数求 exp 会很粗糙）；每行之和为 1。

# %%
section(4, "The causal mask and the softmax in fp32", "因果掩码和 fp32 中的 softmax")
masked = torch.ones(T, T, dtype=torch.bool).triu(1)                             # True: may not look
say("  mask for the first 5 tokens (x = may read, . = masked):", "  前 5 个词元的掩码（x = 可以读，. = 被遮住）：")
for row in (~masked[:5, :5]).tolist():
    marks = " ".join("x" if a else "." for a in row)
    say("    {m}", "    {m}", m=marks)
k_full = kr.repeat_interleave(G, dim=1)                                         # (1, NH, T, D): kv head h // G
v_full = vr.repeat_interleave(G, dim=1)                                         # (1, NH, T, D)
scores = (qr @ k_full.transpose(-1, -2)) / math.sqrt(D)                         # (1, NH, T, T)
scores = scores.masked_fill(masked, float("-inf"))
weights = torch.softmax(scores.float(), dim=-1)                                 # (1, NH, T, T), rows sum to 1
row_sum_error = (weights.sum(-1) - 1).abs().max().item()
future_is_zero = bool(torch.all(weights[..., masked] == 0))                     # no weight on a later key
above = tr("all 0", "全是 0") if future_is_zero else tr("not all 0", "不全是 0")
scores_shape = list(scores.shape)
say("  scores {s}; softmax rows sum to 1: max |sum - 1| = {e:.1e}; weights above the diagonal: {z}",
    "  scores {s}；softmax 每行之和为 1：max |和 - 1| = {e:.1e}；对角线以上的权重：{z}",
    s=scores_shape, e=row_sum_error, z=above)
first_weight = weights[0, 0, 0, 0].item()
say("  the first token can only read itself: weight {w:.3f}", "  第一个词元只能读它自己：权重 {w:.3f}", w=first_weight)


# %% [markdown]
# ## 5. The attention pattern of a sentence / 一个句子的注意力模式
# For each token, the earlier token that head 0 weights most. `--plot` draws every head.
#
# 对每个词元，列出第 0 头权重最大的那个之前的词元。`--plot` 画出所有头。

# %%
section(5, "The attention pattern of a sentence", "一个句子的注意力模式")
for t in range(T):
    w = weights[0, 0, t, : t + 1]
    j = int(w.argmax())
    reader, read, weight = repr(names[t]), repr(names[j]), w[j].item()
    say("  {a:<12} -> {b:<12} {w:.2f}", "  {a:<12} -> {b:<12} {w:.2f}", a=reader, b=read, w=weight)
if ch.tiny:
    say("  (tiny checkpoint: made-up weights and embeddings as input: this pattern means nothing)",
        "  （小检查点：权重是编造的，输入又只是嵌入：这个模式没有意义）")
else:
    say("  (the input is the embeddings, not the real residual stream: chapter 8 shows the real patterns)",
        "  （输入是嵌入而不是真实的残差流：第 8 章展示真实的模式）")


# %% [markdown]
# ## 6. The output gate, then o_proj / 输出门，然后 o_proj
# Each head's result is multiplied by sigmoid(gate), a number between 0 and 1 per entry that the
# token computed from itself: it can switch a head off for this token. Then o_proj mixes the heads.
#
# 每个头的结果乘以 sigmoid(gate)：每个数一个 0 到 1 之间的值，由词元自己算出，可以为这个词元关掉
# 某个头。然后 o_proj 把各头混合起来。

# %%
section(6, "The output gate, then o_proj", "输出门，然后 o_proj")
heads_out = (weights @ v_full).transpose(1, 2).reshape(1, T, NH * D)            # (1, T, NH*D)
s = torch.sigmoid(gate.reshape(1, T, NH * D))                                    # (1, T, NH*D)
gate_mean, gate_low, gate_high = s.mean().item(), (s < 0.1).float().mean().item(), (s > 0.9).float().mean().item()
say("  sigmoid(gate) over {n:,} values: mean {m:.3f}, below 0.1: {lo:.0%}, above 0.9: {hi:.0%}",
    "  sigmoid(gate) 共 {n:,} 个值：均值 {m:.3f}，低于 0.1：{lo:.0%}，高于 0.9：{hi:.0%}",
    n=T * NH * D, m=gate_mean, lo=gate_low, hi=gate_high)
if ch.tiny:
    say("  (tiny checkpoint: made-up gate weights: these shares say nothing about Qwen3.5)",
        "  （小检查点：门的权重是编造的：这些比例与 Qwen3.5 无关）")
with torch.no_grad():
    by_hand = attn.o_proj(heads_out * s)                                         # (1, T, hidden)
    module = attn(x, cos, sin)                                                   # (1, T, hidden)
    no_gate = attn.o_proj(heads_out)
hand_gap, largest = (by_hand - module).abs().max().item(), module.abs().max().item()
say("  by hand == Attention module: max |difference| {d:.1e} (outputs up to {m:.3f})",
    "  手算 == Attention 模块：最大差 {d:.1e}（输出最大 {m:.3f}）", d=hand_gap, m=largest)
gate_effect = (no_gate - module).abs().max().item()
say("  without the gate the output would differ by up to {d:.3f}", "  如果没有门，输出最多相差 {d:.3f}", d=gate_effect)


# %% [markdown]
# ## 7. The same in one call: F.scaled_dot_product_attention / 一次调用：F.scaled_dot_product_attention
# PyTorch's SDPA computes softmax(q k^T / sqrt(d) + mask) v in fused kernels that never hold the
# whole T x T weight matrix and skip the masked blocks. Use it to run a model; write attention by
# hand to see the weights (section 5), to change the formula, or to learn it. `qwen/attention.py`
# is by hand, in blocks of 128 queries that skip the keys the mask hides; `bench/bench_attention.py`
# checks that it stays within 1.5x of SDPA at 1024 tokens in fp32, and prints the ratio on your CPU.
#
# PyTorch 的 SDPA 用融合内核计算 softmax(q k^T / sqrt(d) + mask) v，从不保存完整的 T x T 权重矩阵，
# 并跳过被遮住的块。跑模型时用它；想看权重（第 5 节）、改公式或学习时就手写。
# `qwen/attention.py` 是手写的，每 128 个查询一块，跳过被掩码遮住的键；`bench/bench_attention.py`
# 检查它在 1024 个词元、fp32 时与 SDPA 相差不超过 1.5 倍，并打印在你的 CPU 上的比值。

# %%
section(7, "The same in one call: F.scaled_dot_product_attention", "一次调用：F.scaled_dot_product_attention")
sdpa = F.scaled_dot_product_attention(qr, kr, vr, is_causal=True, enable_gqa=True)   # (1, NH, T, D)
sdpa_gap = (sdpa - weights @ v_full).abs().max().item()
say("  SDPA(q, k, v, is_causal=True, enable_gqa=True) vs softmax(...) @ v by hand: max |difference| {d:.1e}",
    "  SDPA(q, k, v, is_causal=True, enable_gqa=True) 与手算 softmax(...) @ v：最大差 {d:.1e}", d=sdpa_gap)


# %% [markdown]
# ## 8. With a cache: one token at a time / 使用缓存：一次一个词元
# Generating, the model feeds one new token at a time. Its keys and values are appended to the
# cache, and its query reads all of them; the result equals running the whole sequence again.
#
# 生成时模型一次输入一个新词元。它的键和值追加到缓存里，它的查询读取全部键值；结果等于把整个
# 序列重新算一遍。

# %%
section(8, "With a cache: one token at a time", "使用缓存：一次一个词元")
cache = LayerCache()                                                  # qwen/cache.py: k, v grow with each call
with torch.no_grad():
    first = attn(x[:, :-1], cos[:-1], sin[:-1], cache=cache)                     # all but the last token
    last = attn(x[:, -1:], cos[-1:], sin[-1:], cache=cache)                      # the last token alone
cache_gap = (last - module[:, -1:]).abs().max().item()
cached_shape = list(cache.k.shape)
say("  cache after {t} tokens: k {k}; last token through the cache vs the full run: max |difference| {d:.1e}",
    "  {t} 个词元之后的缓存：k {k}；最后一个词元经缓存计算与完整计算相比：最大差 {d:.1e}", t=T, k=cached_shape, d=cache_gap)


# %% [markdown]
# ## Plots / 图

# %%
if ch.args.plot:
    plt = ch.pyplot()
    if plt is not None:
        labels = ch.ticks(ids, names)                 # a piece no installed font can draw: its id
        cols = min(NH, 4)
        rows = (NH + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.2 * rows), squeeze=False)
        for h, ax in enumerate(axes.flat):
            if h >= NH:
                ax.axis("off")
                continue
            image = ax.imshow(weights[0, h].numpy(), cmap="viridis", vmin=0, vmax=1)
            fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)       # the weight each colour stands for
            ax.set_title(ch.label("head {h} (kv head {k})", "头 {h}（键值头 {k}）", h=h, k=h // G), fontsize=9)
            ax.set_xticks(range(T), labels, rotation=90, fontsize=7)
            ax.set_yticks(range(T), labels, fontsize=7)
            ax.set_xlabel(ch.label("key", "键"), fontsize=8)
            ax.set_ylabel(ch.label("query", "查询"), fontsize=8)
        title = ch.label("Layer {l}: attention weights (rows: queries, columns: keys)",
                         "第 {l} 层：注意力权重（行：查询，列：键）", l=L)
        if ch.tiny:
            title += "\n" + ch.label("tiny checkpoint: made-up numbers", "小检查点：数值是编造的")
        fig.suptitle(title, fontsize=10)
        ch.save(fig, "ch06_attention.png")

# %% [markdown]
# ## How to explain it / 怎么讲清楚
# Each token makes a query, a key and a value per head. A token's output is the average of the values
# of itself and the tokens before it, weighted by softmax(q . k / sqrt(d)). Qwen3.5 normalizes q and k
# per head, rotates them by position (RoPE), lets 4 query heads share one key/value head (GQA: 4x less
# cache), and multiplies each head's result by a gate the token computes from itself before o_proj.
#
# 每个词元在每个头上生成查询、键和值。词元的输出是它自己和之前各词元的值的加权平均，权重是
# softmax(q . k / sqrt(d))。Qwen3.5 对每个头的 q 和 k 做归一化，按位置旋转（RoPE），让 4 个查询头
# 共享一个键值头（GQA：缓存是原来的 1/4），并在 o_proj 之前把每个头的结果乘以词元自己算出的门。
#
# ## Summary / 小结
# - `Attention(cfg)(x, cos, sin, cache=None)`: (batch, seq, hidden) -> (batch, seq, hidden), causal.
# - q_proj per head: query rows, then gate rows; q_norm/k_norm per head before RoPE; scale 1/sqrt(head_dim);
#   softmax in fp32; sigmoid(gate) before o_proj.
# - Practice: `python practice/judge.py 209` (causal attention with GQA and the output gate).
#
# - `Attention(cfg)(x, cos, sin, cache=None)`：(批, 序列, 隐藏) -> (批, 序列, 隐藏)，因果。
# - q_proj 每个头先是查询行、再是门行；RoPE 之前按头做 q_norm/k_norm；缩放 1/sqrt(head_dim)；
#   softmax 用 fp32；o_proj 之前乘 sigmoid(gate)。
# - 练习：`python practice/judge.py 209`（带 GQA 和输出门的因果注意力）。

# %%
section(9, "Summary", "小结")
say("  Attention: query heads {nh}, kv heads {kv}, head_dim {d}; causal; gate before o_proj; == SDPA.",
    "  注意力：查询头 {nh} 个，键值头 {kv} 个，head_dim {d}；因果；o_proj 之前乘门；== SDPA。", nh=NH, kv=KV, d=D)
say("  Next: chapter 7, linear attention (Gated DeltaNet). Practice: python practice/judge.py 209",
    "  下一章：第 7 章，线性注意力（Gated DeltaNet）。练习：python practice/judge.py 209")
