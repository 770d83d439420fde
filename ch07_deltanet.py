# %% [markdown]
# # Chapter 7 · Gated DeltaNet, linear attention by hand / 第 7 章 · 手写 Gated DeltaNet（线性注意力）
#
# 18 of Qwen3.5-0.8B's 24 layers are not full attention. They keep, per head, one matrix S of
# 128 x 128 numbers and update it token by token: a memory whose size never grows. This chapter
# builds that layer (`qwen/deltanet.py`) on the real weights: the delta rule that writes into S,
# the decay that makes it forget, the short causal convolution in front, the gated norm behind,
# and two forms of the same rule: one token at a time (to read) and 64 tokens at a time (to run).
#
# Qwen3.5-0.8B 的 24 层里有 18 层不是全注意力。它们每个头只保留一个 128 x 128 的矩阵 S，
# 逐词元更新：一块大小永远不变的记忆。本章在真实权重上搭出这一层（`qwen/deltanet.py`）：
# 往 S 里写入的 delta 规则、让它遗忘的衰减、前面的短因果卷积、后面的带门的 RMSNorm，
# 以及同一规则的两种形式：逐词元（用来读懂）和每次 64 个词元（用来跑得快）。
#
# Run: `python ch07_deltanet.py [--model PATH] [--tiny] [--lang zh] [--plot]`

# %%
import math
import time

import torch
import torch.nn.functional as F

import qwen.deltanet
from engine import known
from engine.cli import chapter, say, section, show_code, size
from qwen.cache import LayerCache
from engine.threads import choose, note, use
from qwen.deltanet import GatedDeltaNet, delta_rule_chunked, delta_rule_recurrent
from qwen.lang import tr
from qwen.norm import RMSNorm, l2norm
from qwen.weights import load

ch = chapter("Chapter 7: Gated DeltaNet (linear attention)", "第 7 章：Gated DeltaNet（线性注意力）", plot=True)


# %% [markdown]
# ## The code / 代码
# What this chapter is about, the delta rule, token by token and in chunks, and the layer: `qwen/deltanet.py`, the whole file, read from the
# module itself (never a second copy): shown in a notebook, printed with `--code`, else where it is.
#
# 本章讲的东西：逐词元和分块的 delta 规则，以及这一层：`qwen/deltanet.py` 的完整文件，直接从模块读出（不是另一份拷贝）：
# notebook 里直接显示，`--code` 打印，否则只说它在哪里。

# %%
taught = show_code(ch, qwen.deltanet)
ch.threads = use(choose(small=True))    # small tensors: a second thread costs more than it saves (and section 7
                                        # then times the work itself, not how busy the other cores are)
cfg, W = ch.cfg, ch.W
NV, DK, DV = cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim
L = cfg.linear_attention_layers[0]                       # the first linear-attention layer
layer = load(GatedDeltaNet(cfg), W, f"layers.{L}.linear_attn.")
gen = torch.Generator().manual_seed(0)

# A sentence and its Qwen3.5 token ids (tests/test_chapters.py checks them with the tokenizer): one
# sentence does not need the 248k-entry tokenizer loaded.
TEXT = ("The cat sat on the mat. It was warm, so the cat fell asleep, and when it woke up the mat was gone. "
        "猫坐在垫子上。垫子很暖和，猫睡着了；醒来时，垫子不见了。")
IDS = [760, 7993, 7338, 383, 279, 5344, 13, 1049, 557, 7948, 11, 748, 279, 7993, 10729, 31016, 11, 321, 948,
       424, 37444, 685, 279, 5344, 557, 7795, 13, 220, 98500, 108604, 99333, 100976, 1710, 99333, 95874, 96065,
       126372, 3709, 98500, 124080, 24178, 112183, 95865, 3709, 99333, 95874, 120127, 1710]
ids = IDS if max(IDS) < cfg.vocab_size else [i % cfg.vocab_size for i in IDS]
if ids != IDS:
    say("  (this checkpoint's vocabulary has {n} entries, not Qwen3.5's: the sentence's token ids are taken\n"
        "  modulo {n}, so below they stand for other tokens)",
        "  （这个检查点的词表只有 {n} 项，不是 Qwen3.5 的：句子的词元 id 取模 {n}，\n"
        "  所以下面它们代表的是别的词元）", n=cfg.vocab_size)
with torch.no_grad():                                    # layer L's input on these tokens: embedding,
    x = W.rows("embed_tokens.weight", ids)[None]         # then the input norm (exact for layer 0 only)
    x = load(RMSNorm(cfg.hidden_size, cfg.rms_norm_eps), W, f"layers.{L}.input_layernorm.")(x)   # (1, T, hidden)


# %% [markdown]
# ## 1. A memory of fixed size / 大小固定的记忆
# Full attention (chapter 6) keeps the keys and values of every past token: its KV cache grows by
# the same amount with each token. A linear-attention layer keeps S, value_heads x dk x dv numbers,
# plus the last 3 inputs of its convolution, whatever the length of the text. Both are counted in
# fp32, as the course's cache keeps them (chapter 9: the model computes in fp32); the KV cache is
# counted in bf16, as chapter 6 counts it.
#
# 全注意力（第 6 章）保留每个过去词元的键和值：键值缓存每多一个词元就增长同样多。线性注意力层
# 只保留 S（值头数 x dk x dv 个数）和卷积最近的 3 个输入，与文本多长无关。这两者都按 fp32 计算，
# 与本课程的缓存一致（第 9 章：模型用 fp32 计算）；键值缓存按 bf16 计算，与第 6 章相同。

# %%
section(1, "A memory of fixed size against a KV cache that grows", "大小固定的记忆与不断增长的键值缓存")


def memory(c):
    """Bytes: the linear layers' states and conv windows (fp32, as chapter 9's cache holds them); the KV
    cache per token (bf16, as chapter 6 counts it)."""
    n_lin = c["layer_types"].count("linear_attention")
    n_full = len(c["layer_types"]) - n_lin
    conv = 2 * c["linear_num_key_heads"] * c["linear_key_head_dim"] + c["linear_num_value_heads"] * c["linear_value_head_dim"]
    state = n_lin * (c["linear_num_value_heads"] * c["linear_key_head_dim"] * c["linear_value_head_dim"] * 4
                     + conv * (c["linear_conv_kernel_dim"] - 1) * 4)
    kv_per_token = 2 * c["num_key_value_heads"] * c["head_dim"] * 2        # k and v, bf16
    return n_lin, n_full, state, kv_per_token


def memory_table(c):
    """The fixed state against the KV cache, per token and at three lengths."""
    n_lin, n_full, state, kv = memory(c)
    dk, dv, nv = c["linear_key_head_dim"], c["linear_value_head_dim"], c["linear_num_value_heads"]
    per_head, fixed, per_token = dk * dv, size(state), size(n_full * kv)
    say("  per head S: {dk} x {dv} = {n:,} numbers; {nv} heads x {L} linear layers + conv windows (fp32): {s}, fixed",
        "  每个头的 S：{dk} x {dv} = {n:,} 个数；{nv} 个头 x {L} 个线性注意力层 + 卷积窗口（fp32）：{s}，固定不变",
        dk=dk, dv=dv, n=per_head, nv=nv, L=n_lin, s=fixed)
    say("  KV cache of the {f} full-attention layers (bf16): {kv} per token", "  {f} 个全注意力层的键值缓存（bf16）：每个词元 {kv}",
        f=n_full, kv=per_token)
    n_layers = n_lin + n_full
    for tokens in (1024, 32768, 262144):
        kv_cache, all_full = size(tokens * n_full * kv), size(tokens * n_layers * kv)
        say("  {t:>7,} tokens: KV cache {a:>9}   linear-attention state {b:>9}   all {n} layers full attention: {c:>9}",
            "  {t:>7,} 个词元：键值缓存 {a:>9}   线性注意力状态 {b:>9}   若 {n} 层全是全注意力：{c:>9}",
            t=tokens, a=kv_cache, b=fixed, n=n_layers, c=all_full)


text_config = cfg.raw.get("text_config", cfg.raw)
memory_table({**text_config, "layer_types": list(cfg.layer_types)})
real = known.real_inventory()
if ch.tiny and real is not None:                          # exact: these follow from the real config alone
    say("  Qwen3.5-0.8B, from its config.json:", "  Qwen3.5-0.8B，根据它的 config.json：")
    memory_table(real["config"]["text_config"])


# %% [markdown]
# ## 2. The delta rule is online regression / delta 规则就是在线回归
# S maps keys to values: reading key k gives k^T S. Plain linear attention adds v k^T to S, so
# writing the same pair twice reads back 2v, and old content stays mixed in. The delta rule first
# reads what S predicts for k, then corrects only the error, by a fraction beta:
# S <- S + k (beta (v - k^T S))^T. With a unit-length k, the error after the write is (1 - beta)
# times the error before: beta = 1 stores v exactly. This is one step of gradient descent on
# |k^T S - v|^2 / 2, with learning rate beta.
#
# S 把键映射到值：读键 k 得到 k^T S。普通线性注意力把 v k^T 加到 S 上，所以同一对写两次会读出 2v，
# 旧内容也一直混在里面。delta 规则先读出 S 对 k 的预测，只修正误差的 beta 倍：
# S <- S + k (beta (v - k^T S))^T。k 长度为 1 时，写后的误差是写前的 (1 - beta) 倍：beta = 1 时
# 正好存下 v。这就是对 |k^T S - v|^2 / 2 做一步梯度下降，学习率为 beta。

# %%
section(2, "The delta rule: read, then correct the error", "delta 规则：先读，再修正误差")
k = l2norm(torch.randn(8, generator=gen))                # a unit key of 8 numbers
v = torch.randn(4, generator=gen)                        # its value
S0 = torch.randn(8, 4, generator=gen)                    # a memory that already holds something
before = (k @ S0 - v).norm().item()
say("  |k^T S - v| before writing: {e:.3f}", "  写入前 |k^T S - v|：{e:.3f}", e=before)
for beta in (1.0, 0.5, 0.1):
    S = S0 + torch.outer(k, beta * (v - k @ S0))         # one write of the delta rule
    after = (k @ S - v).norm().item()
    ratio, kept = after / before, 1 - beta
    say("  beta = {b:.1f}: after the write {a:.3f} = {r:.3f} x before (1 - beta = {o:.1f})",
        "  beta = {b:.1f}：写入后 {a:.3f} = 写入前的 {r:.3f} 倍（1 - beta = {o:.1f}）", b=beta, a=after, r=ratio, o=kept)
S_plain, S_delta = torch.zeros(8, 4), torch.zeros(8, 4)
for _ in range(2):                                       # write the same pair twice
    S_plain = S_plain + torch.outer(k, v)
    S_delta = S_delta + torch.outer(k, v - k @ S_delta)
plain_reads, delta_reads = (k @ S_plain @ v / (v @ v)).item(), (k @ S_delta @ v / (v @ v)).item()
say("  the same pair written twice: plain linear attention reads {p:.2f} x v, the delta rule {d:.2f} x v",
    "  同一对写两次：普通线性注意力读出 {p:.2f} x v，delta 规则读出 {d:.2f} x v", p=plain_reads, d=delta_reads)
one_k, one_v = k[None, None, None], v[None, None, None]                       # (1, 1, 1, 8), (1, 1, 1, 4)
out, _ = delta_rule_recurrent(one_k, one_k, one_v, torch.zeros(1, 1, 1), torch.ones(1, 1, 1), S0[None, None])
read_back_error = (out[0, 0, 0] - v).norm().item()                            # a write with beta = 1, read by its key
say("  delta_rule_recurrent, one step (g = 0, beta = 1), reading with q = k: |out - v| = {e:.1e}",
    "  delta_rule_recurrent 走一步（g = 0，beta = 1），用 q = k 读：|out - v| = {e:.1e}", e=read_back_error)


# %% [markdown]
# ## 3. Why q and k are l2-normalized / 为什么 q 和 k 要做 L2 归一化
# The write removes (beta |k|^2) times the error: with |k| = 1 that is beta. A key of length 2
# would remove 4 beta: with beta = 1 it overshoots, and writing the same pair again makes the
# error 3 times larger each time. The layer applies chapter 3's l2norm to q and k (in fp32), then
# scales q by 1/sqrt(dk), as attention scales its scores (chapter 6). That makes a read smaller
# than what was stored: after a beta = 1 write, reading with q = k returns v exactly, and with
# q = k / sqrt(dk) it returns v / sqrt(dk) (1/11.3 of v at Qwen3.5-0.8B's dk = 128; measured below
# on this checkpoint). The gated RMSNorm after the rule (section 6) divides each head's output by
# its RMS, so this constant factor reaches the layer's output only through the norm's eps.
#
# 一次写入去掉误差的 beta |k|^2 倍：|k| = 1 时就是 beta。长度为 2 的键会去掉 4 beta：beta = 1
# 时会过头，再写一次同一对，误差每次变成 3 倍。所以这一层对 q 和 k 用第 3 章的 L2 归一化
# （在 fp32 中），再像注意力缩放分数那样（第 6 章）把 q 乘以 1/sqrt(dk)。这让读出的值比存进去的小：
# beta = 1 写入之后，用 q = k 读出的正好是 v，用 q = k / sqrt(dk) 读出的是 v / sqrt(dk)（Qwen3.5-0.8B
# 的 dk = 128 时只有 v 的 1/11.3；下面在这个检查点上测量）。规则之后的带门的 RMSNorm（第 6 节）把
# 每个头的输出除以它的均方根，所以这个常数倍只通过归一化的 eps 影响这一层的输出。

# %%
section(3, "Why q and k have length 1", "为什么 q 和 k 的长度是 1")
for scale in (1.0, 2.0):
    kk, S = k * scale, S0.clone()
    errors = [(kk @ S - v).norm().item()]
    for _ in range(4):
        S = S + torch.outer(kk, v - kk @ S)               # beta = 1
        errors.append((kk @ S - v).norm().item())
    errors = tr(", ", "、").join(f"{x:.2g}" for x in errors)
    say("  |k| = {s:.0f}, beta = 1: error before, then after each of 4 writes of the same pair: {e}",
        "  |k| = {s:.0f}，beta = 1：写入前的误差，以及同一对每次写入后的误差（共 4 次）：{e}", s=scale, e=errors)
with torch.no_grad():
    q_, k_, v_, g_, beta_ = layer.rule_inputs(x)         # (1, heads, T, ...) fp32
k_len, q_len = k_.norm(dim=-1), q_.norm(dim=-1)         # (1, heads, T)
k_min, k_max, q_min, q_max = k_len.min().item(), k_len.max().item(), q_len.min().item(), q_len.max().item()
T, q_scale = x.shape[1], DK ** -0.5
say("  layer {l} on {t} tokens: |k| = {a:.4f} .. {b:.4f}; |q| = {c:.4f} .. {d:.4f}, 1/sqrt({dk}) = {e:.4f}",
    "  第 {l} 层、{t} 个词元：|k| = {a:.4f} .. {b:.4f}；|q| = {c:.4f} .. {d:.4f}，1/sqrt({dk}) = {e:.4f}",
    l=L, t=T, a=k_min, b=k_max, c=q_min, d=q_max, dk=DK, e=q_scale)
kd = l2norm(torch.randn(DK, generator=gen))[None, None, None]          # (1, 1, 1, dk): a unit key
vd = torch.randn(1, 1, 1, DV, generator=gen)                           # its value
Sd = torch.randn(1, 1, DK, DV, generator=gen)                          # a memory that holds something
zero, one = torch.zeros(1, 1, 1), torch.ones(1, 1, 1)                  # g = 0, beta = 1
read = {s: delta_rule_recurrent(kd * s, kd, vd, zero, one, Sd)[0].norm().item() / vd.norm().item()
        for s in (1.0, q_scale)}                                       # |read| / |v|
read_unit, read_scaled = read[1.0], read[q_scale]
smaller = read_unit / read_scaled
say("  a read after a beta = 1 write: q = k gives {a:.3f} x v; q = k / sqrt({dk}) gives {b:.3f} x v ({r:.1f}x smaller)",
    "  beta = 1 写入之后读出：q = k 得到 {a:.3f} x v；q = k / sqrt({dk}) 得到 {b:.3f} x v（是前者的 1/{r:.1f}）",
    a=read_unit, b=read_scaled, dk=DK, r=smaller)
with torch.no_grad():
    raw_k = layer.causal_conv(layer.in_proj_qkv(x)).split([layer.nk * DK, layer.nk * DK, layer.nv * layer.dv], -1)[1]
ss = raw_k.float().reshape(*raw_k.shape[:-1], layer.nk, DK).pow(2).sum(-1).min().item()   # smallest |k|^2 before l2norm
shortest = math.sqrt(ss / (ss + 1e-6))
say("  (|k| can fall short of 1: l2norm's eps = 1e-06 sits inside the root; the smallest |k|^2 before it is "
    "{s:.2g}, and sqrt({s:.2g} / ({s:.2g} + 1e-06)) = {r:.4f})",
    "  （|k| 可能略小于 1：l2norm 的 eps = 1e-06 在根号里；归一化前最小的 |k|^2 是 {s:.2g}，"
    "sqrt({s:.2g} / ({s:.2g} + 1e-06)) = {r:.4f}）", s=ss, r=shortest)


# %% [markdown]
# ## 4. The causal convolution: a window of 4 tokens / 因果卷积：4 个词元的窗口
# Before the rule, q, k and v (all three projected together by `in_proj_qkv`) pass through a
# depthwise convolution: each channel mixes its own last 4 inputs with its own 4 weights, then
# silu. Causal: the window is padded with 3 zeros on the left, so token t sees t-3..t, never later.
# During generation the layer keeps those last 3 inputs (the cache's `conv`).
#
# 在规则之前，q、k、v（由 `in_proj_qkv` 一起投影）先过一个逐通道卷积：每个通道用自己的 4 个权重
# 混合自己最近的 4 个输入，再过 silu。因果：窗口在左边补 3 个零，所以词元 t 只看到 t-3..t，
# 看不到后面。生成时这一层保留最近的 3 个输入（缓存里的 `conv`）。

# %%
section(4, "The causal depthwise convolution: 4 tokens, left-padded", "因果逐通道卷积：4 个词元，左侧补零")
with torch.no_grad():
    mixed = layer.in_proj_qkv(x)                          # (1, T, conv channels)
    y = layer.causal_conv(mixed)                          # (1, T, conv channels)
    poked = mixed.clone()
    poked[0, 10] += 1.0                                   # change token 10's input only
    changed = (layer.causal_conv(poked) != y).any(-1)[0].nonzero().flatten().tolist()
    w = layer.conv1d.weight[:, 0]                         # (channels, kernel)
    first = F.silu(w[:, -1] * mixed[0, 0])                # token 0: three zeros, then itself
conv_shape = list(layer.conv1d.weight.shape)
say("  conv weight {shape}: one filter of {k} taps per channel ({c} channels = q, k and v together)",
    "  卷积权重 {shape}：每个通道一个 {k} 抽头的滤波器（{c} 个通道 = q、k、v 合在一起）",
    shape=conv_shape, k=cfg.linear_conv_kernel_dim, c=layer.conv_dim)
say("  changing token 10's input changes the outputs at tokens {c}", "  改变词元 10 的输入，改变的输出位置是 {c}", c=changed)
first_token_ok = torch.allclose(y[0, 0], first)
say("  token 0 sees 3 zeros, then itself: output == silu(w_last * x_0): {ok}",
    "  词元 0 看到 3 个零，然后是它自己：输出等于 silu(w_last * x_0)：{ok}", ok=first_token_ok)


# %% [markdown]
# ## 5. Decay and beta, per head and per token / 每个头、每个词元的衰减和 beta
# Before each write, S is multiplied by exp(g), g = -exp(A_log) * softplus(a + dt_bias) < 0, with
# a = in_proj_a(x) chosen per token and A_log, dt_bias learned per head (A_log is stored in fp32).
# exp(g) near 1 keeps old content for many tokens; near 0 forgets at once. A half-life of
# ln(0.5) / g tokens says how long a write keeps half its weight. beta = sigmoid(in_proj_b(x)).
#
# 每次写入之前，S 先乘以 exp(g)，g = -exp(A_log) * softplus(a + dt_bias) < 0，其中 a = in_proj_a(x)
# 按词元变化，A_log、dt_bias 按头学习（A_log 以 fp32 存储）。exp(g) 接近 1 时旧内容保留很多个词元；
# 接近 0 时立即遗忘。半衰期 ln(0.5) / g 个词元表示一次写入多久后只剩一半权重。beta = sigmoid(in_proj_b(x))。

# %%
section(5, "Decay exp(g) and beta per head, on the tokens of a sentence", "每个头的衰减 exp(g) 和 beta（在一句话的词元上）")
decay = g_[0].exp()                                       # (heads, T)
half_life = math.log(0.5) / g_[0].median(-1).values      # (heads,): tokens
n_ids, opening = len(ids), TEXT[:40]
say("  layer {l}, {t} tokens of: {text!r}...", "  第 {l} 层，{t} 个词元：{text!r}……", l=L, t=n_ids, text=opening)
say("  head   exp(g): median [min, max]     half-life (tokens)   beta: median",
    "  头     exp(g)：中位数 [最小，最大]    半衰期（词元）       beta：中位数")
rows = torch.stack([decay.median(-1).values, decay.min(-1).values, decay.max(-1).values, half_life,
                    beta_[0].median(-1).values], -1).tolist()     # (heads, 5)
for h, (median, lo, hi, hl, b) in enumerate(rows):
    say("  {h:>4}   {m:.3f} [{lo:.3f}, {hi:.3f}]        {hl:10.1f}       {b:.3f}",
        "  {h:>4}   {m:.3f} [{lo:.3f}, {hi:.3f}]        {hl:10.1f}       {b:.3f}", h=h, m=median, lo=lo, hi=hi, hl=hl, b=b)
per_layer = {}
for i in cfg.linear_attention_layers:                    # from the weights alone: the decay at a = 0
    A_log, dt_bias = W[f"layers.{i}.linear_attn.A_log"].float(), W[f"layers.{i}.linear_attn.dt_bias"].float()
    per_layer[i] = math.log(0.5) / (-A_log.exp() * F.softplus(dt_bias))   # half-lives at a = 0
spans = torch.stack(list(per_layer.values()))           # (linear layers, heads)
n_heads, n_layers, shortest_hl, longest_hl = spans.numel(), len(per_layer), spans.min().item(), spans.max().item()
say("  at a = 0 (weights only), the half-lives of all {n} heads in {m} layers span {lo:.3g} to {hi:.3g} tokens",
    "  在 a = 0 处（只看权重），{m} 层共 {n} 个头的半衰期从 {lo:.3g} 到 {hi:.3g} 个词元",
    n=n_heads, m=n_layers, lo=shortest_hl, hi=longest_hl)

fast, slow = half_life.argmin().item(), half_life.argmax().item()
if ch.tiny:
    say("  (tiny checkpoint: A_log, dt_bias and the projections are random draws, so these heads and half-lives say\n"
        "  nothing about Qwen3.5; run on Qwen3.5-0.8B itself (python main.py download) to see its 18 layers x 16 heads)",
        "  （小检查点：A_log、dt_bias 和投影都是随机数，这些头和半衰期与 Qwen3.5 无关；\n"
        "  要看 Qwen3.5-0.8B 的 18 层 x 16 个头，请用它本身运行（python main.py download））")
else:
    fast_hl, slow_hl = half_life[fast].item(), half_life[slow].item()
    say("  fastest-forgetting head {f}: half-life {a:.1f} tokens; longest memory: head {s}, {b:.1f} tokens",
        "  遗忘最快的是头 {f}：半衰期 {a:.1f} 个词元；记得最久的是头 {s}：{b:.1f} 个词元",
        f=fast, a=fast_hl, s=slow, b=slow_hl)

if ch.args.plot and (plt := ch.pyplot()) is not None:
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4))
    for h in range(NV):
        ax1.plot(decay[h].numpy(), lw=1)
    ax1.set_xlabel(ch.label("token", "词元"))
    ax1.set_ylabel("exp(g)")
    ax1.set_title(ch.label("layer {l}: decay per token, one line per head", "第 {l} 层：每个词元的衰减，每个头一条线", l=L))
    for j, (i, hl) in enumerate(per_layer.items()):
        ax2.scatter([j] * len(hl), hl.numpy(), s=8)
    ax2.set_yscale("log")
    ax2.set_xticks(range(len(per_layer)), [str(i) for i in per_layer])
    ax2.set_xlabel(ch.label("layer", "层"))
    ax2.set_ylabel(ch.label("half-life at a = 0 (tokens)", "a = 0 时的半衰期（词元）"))
    fig.suptitle(ch.label("Gated DeltaNet decay", "Gated DeltaNet 的衰减")
                 + (ch.label(" (tiny checkpoint: made-up numbers)", "（小检查点：数值是编造的）") if ch.tiny else ""))
    ch.save(fig, "ch07_decay.png")


# %% [markdown]
# ## 6. The rule, then the gated norm / 先是规则，然后是带门的 RMSNorm
# Each head's output S^T q is normalized on its own (RMS 1 over its dv numbers), scaled by the
# learned weight and by silu(z), z = in_proj_z(x): chapter 3's gated RMSNorm. Then out_proj maps
# the heads back to the hidden size.
#
# 每个头的输出 S^T q 单独归一化（在它的 dv 个数上均方根为 1），乘以学到的权重和 silu(z)，
# z = in_proj_z(x)：这就是第 3 章的带门的 RMSNorm。然后 out_proj 把各个头映射回隐藏维度。

# %%
section(6, "The rule's output, then the gated RMSNorm", "规则的输出，然后是带门的 RMSNorm")
with torch.no_grad():
    o, state = delta_rule_chunked(q_, k_, v_, g_, beta_)      # (1, heads, T, dv), (1, heads, dk, dv)
    rms = o.pow(2).mean(-1).sqrt()                              # (1, heads, T)
    normed = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + cfg.rms_norm_eps)
rms_lo, rms_hi, rms_median = rms.min().item(), rms.max().item(), rms.median().item()
normed_median = normed.pow(2).mean(-1).sqrt().median().item()
say("  the rule's output per head and token: RMS {a:.3g} .. {b:.3g} (median {m:.3g}); normalized: median RMS {n:.3f}",
    "  规则按头、按词元的输出：均方根 {a:.3g} .. {b:.3g}（中位数 {m:.3g}）；归一化后：均方根中位数 {n:.3f}",
    a=rms_lo, b=rms_hi, m=rms_median, n=normed_median)
say("  (eps = {e:g} sits inside the root: a vector whose mean square is near eps comes out below RMS 1)",
    "  （eps = {e:g} 在根号里：平方均值接近 eps 的向量归一化后均方根小于 1）", e=cfg.rms_norm_eps)
state_shape = list(state.shape)
say("  final state: {shape}, fp32: what generation carries from token to token (chapter 9)",
    "  最后的状态：{shape}，fp32：生成时从一个词元带到下一个词元的东西（第 9 章）", shape=state_shape)
with torch.no_grad():
    full = layer(x)                                         # (1, T, hidden)
    cache = LayerCache()                            # conv and state (qwen/cache.py), None at first
    steps = [layer(x[:, :-4], cache)] + [layer(x[:, t:t + 1], cache) for t in range(T - 4, T)]
cached_gap, largest = (torch.cat(steps, 1) - full).abs().max().item(), full.abs().max().item()
in_shape, out_shape = list(x.shape), list(full.shape)
say("  the whole layer: {a} -> {b}; prefill then 4 single tokens with a cache == the whole text at once:\n"
    "  max |difference| {d:.1e} (of values up to {m:.2g})",
    "  整层：{a} -> {b}；先预填充、再用缓存逐个处理 4 个词元 == 一次处理整段文本：\n"
    "  最大 |差值| {d:.1e}（数值最大 {m:.2g}）", a=in_shape, b=out_shape, d=cached_gap, m=largest)


# %% [markdown]
# ## 7. Recurrent against chunked / 递推形式与分块形式
# The recurrent form takes one small step per token. The chunked form takes 64 tokens at a time:
# inside a chunk, each token's write depends on the earlier ones through a lower-triangular system
# (I + A) U = ..., solved for the chunk's 64 tokens and all heads at once; then S is handed to
# the next chunk (the WY / UT form, derived in `delta_rule_chunked`'s docstring). Same numbers:
# 2048 tokens take 32 steps of large matrix products instead of 2048 small ones.
#
# 递推形式每个词元走一小步。分块形式每次处理 64 个词元：块内每个词元的写入通过一个下三角方程组
# (I + A) U = ... 依赖前面的词元，一次为块内 64 个词元、所有头一起求解；然后把 S 交给下一块
# （WY / UT 形式，推导见 `delta_rule_chunked` 的文档字符串）。数值相同：2048 个词元只要 32 步
# 大的矩阵乘法，而不是 2048 步小运算。

# %%
section(7, "Recurrent against chunked: the same numbers, and their speed", "递推形式与分块形式：同样的数值，以及速度")


def rule_inputs(T):
    """Random inputs of this layer's shapes (speed does not depend on the values)."""
    q = l2norm(torch.randn(1, NV, T, DK, generator=gen)) / math.sqrt(DK)
    k = l2norm(torch.randn(1, NV, T, DK, generator=gen))
    return q, k, torch.randn(1, NV, T, DV, generator=gen), -torch.rand(1, NV, T, generator=gen), torch.rand(1, NV, T, generator=gen)


def best_time(rule, inputs, runs):
    """The fastest of `runs` calls of rule(*inputs), in seconds."""
    best = math.inf
    for _ in range(runs):
        start = time.perf_counter()
        rule(*inputs)
        best = min(best, time.perf_counter() - start)
    return best


a = rule_inputs(200)
s0 = torch.randn(1, NV, DK, DV, generator=gen)
(o_r, s_r), (o_c, s_c) = delta_rule_recurrent(*a, s0), delta_rule_chunked(*a, s0)
output_gap, state_gap, largest = (o_r - o_c).abs().max().item(), (s_r - s_c).abs().max().item(), o_r.abs().max().item()
say("  200 tokens (not a multiple of 64), from a given state: max |recurrent - chunked| = {d:.1e} (output),\n"
    "  {e:.1e} (final state), for values up to {m:.2g}",
    "  200 个词元（不是 64 的倍数），从给定状态开始：最大 |递推 - 分块| = {d:.1e}（输出），\n"
    "  {e:.1e}（最后的状态），数值最大 {m:.2g}", d=output_gap, e=state_gap, m=largest)
for tokens, runs in ((64, 3), (512, 1), (2048, 1)):
    a = rule_inputs(tokens)
    recurrent, chunked = best_time(delta_rule_recurrent, a, runs), best_time(delta_rule_chunked, a, runs)
    ms_r, ms_c, faster = recurrent * 1e3, chunked * 1e3, recurrent / chunked
    say("  {T:>5} tokens x {h} heads: recurrent {r:7.1f} ms, chunked {c:6.1f} ms ({x:.1f}x)",
        "  {T:>5} 个词元 x {h} 个头：递推 {r:7.1f} 毫秒，分块 {c:6.1f} 毫秒（{x:.1f} 倍）",
        T=tokens, h=NV, r=ms_r, c=ms_c, x=faster)
say("  (best of {a} runs at 64 tokens, one run at 512 and 2048;\n"
    "  bench/bench_deltanet.py measures a Qwen3.5-0.8B-size layer properly, also with all threads)",
    "  （64 个词元取 {a} 次中最快的一次，512 和 2048 个词元各跑一次；\n"
    "  严格的测量（Qwen3.5-0.8B 大小的层，也包括用全部线程）见 bench/bench_deltanet.py）", a=3)
note(ch.threads)
if ch.tiny:
    say("  (tiny sizes, {h} heads of {dk} x {dv}: the recurrent form's time is mostly the fixed cost of its many\n"
        "  small calls, so these ratios say little about a Qwen3.5-0.8B layer of 16 heads of 128 x 128)",
        "  （小检查点的大小是 {h} 个 {dk} x {dv} 的头：递推形式的时间主要是许多次小调用的固定开销，\n"
        "  这些比值说明不了 Qwen3.5-0.8B 的层（16 个 128 x 128 的头）的情况）", h=NV, dk=DK, dv=DV)


# %% [markdown]
# ## How to explain it / 怎么讲给别人听
# A linear-attention layer is a notebook of fixed size that maps keys to values. For each token it
# first fades the notebook a little (the decay, chosen per head and per token), then looks up the
# token's key, compares the answer with the token's value, and writes only the difference (scaled
# by beta). Reading is a lookup with the query. Keys have length 1 so that a full correction is
# exact; a 4-token convolution gives each token a glance at its neighbours first. Computing it
# 64 tokens at a time gives the same numbers with fewer, larger matrix products.
#
# 线性注意力层是一本大小固定、把键映射到值的笔记本。每来一个词元，它先让笔记本淡去一点（衰减，
# 按头、按词元决定），再用这个词元的键查一下，把查到的和词元的值比较，只写入差值（乘以 beta）。
# 读就是用查询去查。键的长度为 1，这样完整的修正是精确的；一个 4 个词元的卷积让每个词元先看一眼
# 邻居。每次算 64 个词元，数值不变，矩阵乘法更少、更大。
#
# ## Summary / 小结
# - S: value_heads x dk x dv numbers per layer, fixed; the KV cache grows with every token.
# - Delta rule: S <- exp(g) S, then S <- S + k (beta (v - k^T S))^T, output S^T q.
# - g = -exp(A_log) softplus(a + dt_bias) < 0, beta = sigmoid(b), both in fp32; q, k unit length.
# - Causal depthwise conv (kernel 4, left-padded) and silu before; gated RMSNorm and out_proj after.
# - Recurrent and chunked forms: the same function; chunks of 64 solve a triangular system.
#
# - S：每层 值头数 x dk x dv 个数，固定不变；键值缓存每多一个词元就增长。
# - delta 规则：S <- exp(g) S，然后 S <- S + k (beta (v - k^T S))^T，输出 S^T q。
# - g = -exp(A_log) softplus(a + dt_bias) < 0，beta = sigmoid(b)，都用 fp32；q、k 长度为 1。
# - 之前是因果逐通道卷积（卷积核 4，左侧补零）和 silu；之后是带门的 RMSNorm 和 out_proj。
# - 递推形式与分块形式：同一个函数；每 64 个词元一块，解一个三角方程组。

# %%
say("\nExercises for this chapter: 220, 221, 222. Try one: python practice/judge.py 220",
    "\n本章练习：220、221、222。试一个：python practice/judge.py 220")
