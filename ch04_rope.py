# %% [markdown]
# # Chapter 4 · RoPE: positions by rotation / 第 4 章 · 旋转位置编码（RoPE）
#
# Attention (chapter 6) scores a query against every key with a dot product, and a dot product
# cannot tell where two tokens stand: "dog bites man" and "man bites dog" would look alike.
# Qwen3.5 tells it by *rotating* queries and keys before the dot product, by an angle that grows
# with the position (`qwen/rope.py`). This chapter builds the rotation by hand on one pair of
# numbers, derives the frequencies from the config, applies RoPE to real queries and keys of the
# first full-attention layer, and checks the property everything rests on: the score of q at
# position m with k at position n depends only on m - n.
#
# 注意力（第 6 章）用点积给查询和每个键打分，而点积分不出两个词元在什么位置：
# "狗咬人"和"人咬狗"看起来会一样。Qwen3.5 在点积之前把查询和键*旋转*一个随位置增大的角度
# （`qwen/rope.py`）。本章先在一对数上手算旋转，再从配置推出频率，把 RoPE 用到第一个全注意力层
# 真实的查询和键上，并验证一切的基础：位置 m 的 q 和位置 n 的 k 的分数只取决于 m - n。
#
# Run: `python ch04_rope.py [--model PATH] [--tiny] [--lang zh] [--plot]`

# %%
import math

import torch

import qwen.rope
from engine.cli import chapter, say, section, show_code
from engine.known import real_inventory
from qwen.attention import Attention
from qwen.lang import tr
from qwen.norm import RMSNorm
from qwen.rope import RotaryEmbedding, apply_rope, inverse_frequencies, mrope_angles, rope_settings
from qwen.config import Config
from qwen.weights import load

ch = chapter("Chapter 4: RoPE, positions by rotation", "第 4 章：旋转位置编码（RoPE）", plot=True)


# %% [markdown]
# ## The code / 代码
# What this chapter is about, the rotation: `qwen/rope.py`, the whole file, read from the
# module itself (never a second copy): shown in a notebook, printed with `--code`, else where it is.
#
# 本章讲的东西：旋转：`qwen/rope.py` 的完整文件，直接从模块读出（不是另一份拷贝）：
# notebook 里直接显示，`--code` 打印，否则只说它在哪里。

# %%
taught = show_code(ch, qwen.rope)
cfg, W = ch.cfg, ch.W
rope = RotaryEmbedding(cfg)
R, D = rope.rotary_dim, cfg.head_dim
text_cfg = cfg.raw.get("text_config", cfg.raw)
CONTEXT = text_cfg.get("max_position_embeddings", 262144)
inventory = real_inventory()                          # Qwen3.5-0.8B's published config, for the lines after tiny figures
if inventory:
    real_text = inventory["config"]["text_config"]
    real_rotary, real_theta, _ = rope_settings(Config.from_dict(inventory["config"]))
    REAL = dict(head_dim=real_text["head_dim"], rotary_dim=real_rotary, theta=real_theta,
                context=real_text["max_position_embeddings"])


def wavelengths(rotary_dim, theta):
    """Tokens per full turn of each pair: 2 pi / f_i."""
    return 2 * math.pi / inverse_frequencies(rotary_dim, theta).double()


# %% [markdown]
# ## 1. A dot product is blind to order / 点积不看顺序
# Without positions, the score of a query with a key is the same wherever the key stands.
# RoPE turns the key by its position's angle, so the same two vectors score differently at
# different distances.
#
# 没有位置信息时，一个查询和一个键的分数与键在哪儿无关。RoPE 按位置把键转一个角度，
# 于是同样的两个向量在不同距离上得到不同的分数。

# %%
section(1, "A dot product is blind to order", "点积不看顺序")
g = torch.Generator().manual_seed(0)
q, k = torch.randn(1, 1, 1, D, generator=g), torch.randn(1, 1, 1, D, generator=g)


def at(x, m):
    """x (1, 1, 1, head_dim) rotated to position m."""
    return apply_rope(x, *rope(torch.tensor([m])))


plain = (q * k).sum().item()
say("  two random vectors, q . k with no positions: {s:+.4f} whether k stands at position 2 or 7",
    "  两个随机向量，不加位置时 q . k = {s:+.4f}，无论 k 在位置 2 还是 7", s=plain)
score_at_2, score_at_7 = (at(q, 9) * at(k, 2)).sum().item(), (at(q, 9) * at(k, 7)).sum().item()
say("  with RoPE, q at 9:  k at 2 -> {a:+.4f},  k at 7 -> {b:+.4f}",
    "  加上 RoPE，q 在位置 9：k 在 2 -> {a:+.4f}，k 在 7 -> {b:+.4f}", a=score_at_2, b=score_at_7)


# %% [markdown]
# ## 2. Rotating one pair by hand / 手算一对数的旋转
# A pair (x1, x2) is a point in the plane; turning it by the angle a gives
# (x1 cos a - x2 sin a, x2 cos a + x1 sin a). Turning keeps its length, and two turns add up.
#
# 一对数 (x1, x2) 是平面上的一个点；转过角度 a 得到 (x1 cos a - x2 sin a, x2 cos a + x1 sin a)。
# 旋转不改变长度，两次旋转的角度相加。

# %%
section(2, "Rotating one pair by hand", "手算一对数的旋转")


def turn(p, a):
    return (p[0] * math.cos(a) - p[1] * math.sin(a), p[1] * math.cos(a) + p[0] * math.sin(a))


def dot(s, t):
    return s[0] * t[0] + s[1] * t[1]


pair = (3.0, 4.0)
quarter = turn(pair, math.pi / 2)
length_before, length_after = math.hypot(*pair), math.hypot(*quarter)
say("  (3, 4) turned by 90 degrees -> ({x:+.3f}, {y:+.3f}); length {a:.3f} -> {b:.3f}",
    "  (3, 4) 转 90 度 -> ({x:+.3f}, {y:+.3f})；长度 {a:.3f} -> {b:.3f}",
    x=quarter[0], y=quarter[1], a=length_before, b=length_after)
twice = turn(turn(pair, 0.3), 0.5)
once = turn(pair, 0.8)
say("  turn by 0.3 then 0.5 == turn by 0.8: ({a:.6f}, {b:.6f}) == ({c:.6f}, {d:.6f})",
    "  先转 0.3 再转 0.5 == 一次转 0.8：({a:.6f}, {b:.6f}) == ({c:.6f}, {d:.6f})",
    a=twice[0], b=twice[1], c=once[0], d=once[1])
u, v = (1.0, 2.0), (-0.5, 1.5)
both_turned, one_turned = dot(turn(u, 9 * 0.4), turn(v, 2 * 0.4)), dot(turn(u, 7 * 0.4), v)
say("  dot(turn(u, 9a), turn(v, 2a)) = {x:.6f} = dot(turn(u, 7a), v) = {y:.6f}   (a = 0.4)",
    "  dot(turn(u, 9a), turn(v, 2a)) = {x:.6f} = dot(turn(u, 7a), v) = {y:.6f}   （a = 0.4）",
    x=both_turned, y=one_turned)


# %% [markdown]
# ## 3. Frequencies from the config, and partial rotation / 由配置得到频率，以及部分旋转
# Pair i turns by f_i = theta^(-2i / rotary_dim) radians per token. Only the first
# rotary_dim = head_dim x partial_rotary_factor entries of each head are rotated; the rest carry
# no position at all. The pairs are entries (i, i + rotary_dim/2) ("rotate-half"), not neighbours.
#
# 第 i 对每个词元转 f_i = theta^(-2i / rotary_dim) 弧度。每个头只旋转前
# rotary_dim = head_dim x partial_rotary_factor 个数，其余的完全不带位置。配对方式是
# (i, i + rotary_dim/2)（"rotate-half"），不是相邻的两个数。

# %%
section(3, "Frequencies from the config, and partial rotation", "由配置得到频率，以及部分旋转")
_, theta, section_sizes = rope_settings(cfg)
f = rope.inv_freq
pairs_rotated, unrotated = R // 2, D - R
say("  rope_theta {t:g}, head_dim {d}, rotary_dim {r}: {p} pairs rotate, {rest} of {d} entries carry no position",
    "  rope_theta {t:g}，head_dim {d}，rotary_dim {r}：{p} 对旋转，{d} 个数里有 {rest} 个不带位置",
    t=theta, d=D, r=R, p=pairs_rotated, rest=unrotated)
lam = wavelengths(R, theta)
fastest, fastest_turn, slowest, slowest_turn = f[0].item(), lam[0].item(), f[-1].item(), lam[-1].item()
say("  fastest pair: {f0:.3g} rad/token (a full turn every {l0:.2f} tokens); slowest: {f1:.3g} rad/token ({l1:,.0f} tokens)",
    "  最快的一对：每个词元 {f0:.3g} 弧度（每 {l0:.2f} 个词元转一圈）；最慢的：{f1:.3g} 弧度（{l1:,.0f} 个词元）",
    f0=fastest, l0=fastest_turn, f1=slowest, l1=slowest_turn)
if ch.tiny and inventory:
    real_slowest = wavelengths(REAL["rotary_dim"], REAL["theta"])[-1].item()
    real_pairs, real_unrotated = REAL["rotary_dim"] // 2, REAL["head_dim"] - REAL["rotary_dim"]
    say("  Qwen3.5-0.8B (from its config): {p} pairs rotate, {rest} of {d} entries carry no position; "
        "slowest pair: a turn every {l:,.0f} tokens",
        "  Qwen3.5-0.8B（由其配置算出）：{p} 对旋转，{d} 个数里有 {rest} 个不带位置；最慢的一对每 {l:,.0f} 个词元转一圈",
        p=real_pairs, rest=real_unrotated, d=REAL["head_dim"], l=real_slowest)
x = torch.randn(1, 1, 5, D, generator=g)
cos, sin = rope(torch.arange(5))
y = apply_rope(x, cos, sin)
rest_unchanged = torch.equal(y[..., R:], x[..., R:])                            # the unrotated entries, bit for bit
length_change = (y.norm(dim=-1) - x.norm(dim=-1)).abs().max().item()
say("  apply_rope on 5 positions: entries {r}.. unchanged: {same}; length of each vector kept: max change {n:.1e}",
    "  对 5 个位置做 apply_rope：第 {r} 个数之后不变：{same}；每个向量长度不变：最大变化 {n:.1e}",
    r=R, same=rest_unchanged, n=length_change)


# %% [markdown]
# ## 4. The slowest pair and the context length / 最慢的一对与上下文长度
# A pair whose turn takes longer than the context never comes back to where it started, so its
# angle alone tells positions apart across the whole context; fast pairs repeat many times.
#
# 转一圈比整个上下文还长的那些对永远不会转回起点，所以单凭它们的角度就能在整个上下文里区分位置；
# 快的那些对会转很多圈。

# %%
section(4, "The slowest pair and the context length", "最慢的一对与上下文长度")


def context_lines(lam, context, prefix_en, prefix_zh):
    """One line: how many pairs turn less than once across the context."""
    prefix, longer, n_pairs = tr(prefix_en, prefix_zh), int((lam > context).sum()), len(lam)
    slowest_angle = 2 * math.pi * context / lam[-1].item()
    say("  {p}context {c:,} tokens: {n} of {m} pairs turn less than once across it; the slowest turns {a:.3f} rad",
        "  {p}上下文 {c:,} 个词元：{m} 对里有 {n} 对在其中转不满一圈；最慢的一对只转 {a:.3f} 弧度",
        p=prefix, c=context, n=longer, m=n_pairs, a=slowest_angle)


context_lines(lam, CONTEXT, "", "")
if ch.tiny and inventory:
    context_lines(wavelengths(REAL["rotary_dim"], REAL["theta"]), REAL["context"],
                  "Qwen3.5-0.8B (from its config): ", "Qwen3.5-0.8B（由其配置算出）：")


# %% [markdown]
# ## 5. On the layer's own queries and keys: only m - n matters / 在这一层自己的查询和键上：只有 m - n 起作用
# Take two rows of the embedding table (any two would do), pass them through the first full-attention layer's input norm,
# q_proj/k_proj and q_norm/k_norm (chapter 6 explains each step), and rotate them to many
# positions. The inputs are embeddings, not the residual stream that really reaches this layer
# (it needs the linear-attention layers of chapter 7): the identity below holds for any vectors.
#
# 取嵌入表的两行（任意两行都可以），经过第一个全注意力层的输入归一化、q_proj/k_proj 和 q_norm/k_norm
# （第 6 章逐步讲解），再转到许多位置上。输入是嵌入，而不是真正到达这一层的残差流（那需要第 7 章的
# 线性注意力层）：下面的等式对任何向量都成立。

# %%
section(5, "On the layer's own queries and keys: only m - n matters", "在这一层自己的查询和键上：只有 m - n 起作用")
layer = cfg.full_attention_layers[0]
attn = load(Attention(cfg), W, f"layers.{layer}.self_attn.")
norm = load(RMSNorm(cfg.hidden_size, cfg.rms_norm_eps), W, f"layers.{layer}.input_layernorm.")
ids = [760, 7993] if cfg.vocab_size > 7993 else [0, 1]                         # any two rows would do
h = norm(W.rows("embed_tokens.weight", ids))                                     # (2, hidden), bf16
with torch.no_grad():
    qh = attn.q_norm(attn.q_proj(h).view(2, cfg.num_attention_heads, 2, D)[:, :, 0])   # (2, heads, D): query rows
    kh = attn.k_norm(attn.k_proj(h).view(2, cfg.num_key_value_heads, D))               # (2, kv_heads, D)
q0, k0 = qh[0, 0].view(1, 1, 1, D).double(), kh[1, 0].view(1, 1, 1, D).double()   # head 0: query of token 0, key of token 1


def rope64(x, m):
    """x rotated to position m, in float64 (the angles as the module computes them, in fp32)."""
    return apply_rope(x, *(c.double() for c in rope(torch.tensor([m]))))


def score(m, n):
    return (rope64(q0, m) * rope64(k0, n)).sum().item()


def angles64(m):
    """cos, sin of m x f_i, the angle and both in float64 (the module computes them in fp32)."""
    angles = m * rope.inv_freq.double()                                          # (rotary_dim/2,)
    angles = torch.cat((angles, angles))[None]                                   # (1, rotary_dim)
    return angles.cos(), angles.sin()


pairs = [(3, 0), (10, 7), (500, 497), (4000, 3997)]
places = tr(", ", "、").join(f"({m}, {n})" for m, n in pairs)
say("  layer {l}, head 0, q of embedding row {a} . k of row {b}, at (m, n) = {p}:",
    "  第 {l} 层第 0 头，嵌入表第 {a} 行的 q . 第 {b} 行的 k，(m, n) = {p}：", l=layer, a=ids[0], b=ids[1], p=places)
values = [score(m, n) for m, n in pairs]
exact = [(apply_rope(q0, *angles64(m)) * apply_rope(k0, *angles64(n))).sum().item() for m, n in pairs]
spread, spread_exact = max(values) - min(values), max(exact) - min(exact)     # the same m - n, four places
scores = tr(", ", "、").join(f"{s:+.5f}" for s in values)
say("    {v}  (m - n = 3 each time: spread {s:.1e}, from fp32 rounding of the angles m x f_i\n"
    "    and of their cos and sin; with float64 angles {e:.0e})",
    "    {v}（每次 m - n = 3：最大差 {s:.1e}，来自 fp32 对角度 m x f_i\n"
    "    及其 cos、sin 的舍入；角度用 float64 时为 {e:.0e}）", v=scores, s=spread, e=spread_exact)
other_distances = [score(0, 0), score(30, 0), score(300, 0)]
say("    at m - n = 0, 30, 300: {a:+.5f}, {b:+.5f}, {c:+.5f}  (another distance, another score)",
    "    m - n = 0、30、300 时：{a:+.5f}、{b:+.5f}、{c:+.5f}（距离不同，分数不同）",
    a=other_distances[0], b=other_distances[1], c=other_distances[2])
fixed = (q0[..., R:] * k0[..., R:]).sum().item()
curve = torch.tensor([score(d, 0) for d in range(0, 2048)])
lowest, highest = curve.min().item(), curve.max().item()
say("  of the score, the {rest} unrotated entries give {c:+.5f} at every distance; over distances 0..2047\n"
    "  the rotated {r} entries move it between {lo:+.5f} and {hi:+.5f}",
    "  分数中，{rest} 个不旋转的数在任何距离上都贡献 {c:+.5f}；在距离 0..2047 上，\n"
    "  旋转的 {r} 个数让它在 {lo:+.5f} 和 {hi:+.5f} 之间变化", rest=unrotated, r=R, c=fixed, lo=lowest, hi=highest)
if ch.tiny:
    say("  (tiny checkpoint: the weights are made up, so these scores say nothing about Qwen3.5; only the equalities hold)",
        "  （小检查点：权重是编造的，这些分数与 Qwen3.5 无关；只有上面的等式成立）")


# %% [markdown]
# ## 6. Multimodal RoPE reduces to plain RoPE for text / 多模态 RoPE 对文本就是普通 RoPE
# The config's `mrope_section` deals the frequency pairs out among three position streams
# (time, height, width), interleaved, for images and video. For text the three streams are the
# same number, so every pair gets position x f_i whatever stream it reads: the plain RoPE of
# this chapter is the special case of 3D RoPE where t = h = w. Chapter 11 puts an image in the
# prompt, where its tokens get three different positions (t, h, w).
#
# 配置里的 `mrope_section` 把频率对交替分给三个位置流（时间、高、宽），用于图像和视频。
# 对文本来说三个流是同一个数，所以不管读哪个流，每一对得到的都是 位置 x f_i：本章的普通 RoPE
# 就是 3D RoPE 在 t = h = w 时的特例。第 11 章把图像放进提示词，图像的词元得到三个不同的位置（t, h, w）。

# %%
section(6, "Multimodal RoPE reduces to plain RoPE for text", "多模态 RoPE 对文本就是普通 RoPE")
pos = torch.arange(64)
plain_angles = pos[:, None].float() * f                                          # (64, rotary_dim/2): m x f_i
text_angles = mrope_angles(pos.expand(3, -1), f, section_sizes)                  # t = h = w = m
grid = torch.stack([pos // 16, pos // 4 % 4, pos % 4])                           # an image-like 4 x 4 x 4 grid
grid_angles = mrope_angles(grid, f, section_sizes)
n_sections = sum(section_sizes)
say("  mrope_section {s} (pairs for time, height, width; sum {n} = rotary_dim / 2)",
    "  mrope_section {s}（时间、高、宽各占的对数；和为 {n} = rotary_dim / 2）", s=section_sizes, n=n_sections)
text_gap = (text_angles - plain_angles).abs().max().item()
say("  text positions (three equal streams): max |mrope - plain| = {a:.1e}",
    "  文本位置（三个流相等）：max |mrope - 普通| = {a:.1e}", a=text_gap)
grid_gap = (grid_angles - plain_angles).abs().max().item()
say("  image-grid positions (three different streams): max |mrope - plain| = {a:.1f} rad",
    "  图像网格位置（三个流不同）：max |mrope - 普通| = {a:.1f} 弧度", a=grid_gap)
say("  so plain RoPE is 3D RoPE with t = h = w; chapter 11 gives an image's tokens three different positions",
    "  所以普通 RoPE 就是 t = h = w 时的 3D RoPE；第 11 章给图像的词元三个不同的位置")


# %% [markdown]
# ## 7. Angles in fp32 / 角度用 fp32
# An angle is position x frequency, and positions reach hundreds of thousands: bf16 keeps only
# 8 significant bits, so the angle itself would be wrong by whole turns.
#
# 角度是 位置 x 频率，而位置可以到几十万：bf16 只有 8 位有效位，角度本身就会差出好几圈。

# %%
section(7, "Angles in fp32", "角度用 fp32")
m = torch.tensor(5000.0)
a32, a16 = (m * f[0]).item(), (m * f[0]).bfloat16().item()
bf16_error = abs(a32 - a16)                                                     # radians
turns = bf16_error / (2 * math.pi)
say("  position 5000, fastest pair: angle {a:.1f} rad in fp32, {b:.1f} rad in bf16: off by {d:.1f} rad ({t:.2f} turns)",
    "  位置 5000、最快的一对：fp32 中角度 {a:.1f} 弧度，bf16 中 {b:.1f} 弧度：差 {d:.1f} 弧度（{t:.2f} 圈）",
    a=a32, b=a16, d=bf16_error, t=turns)
cos_big, _ = rope(torch.tensor([0, 200000]))
cos_shape = list(cos_big.shape)
say("  cos/sin dtype {d}, shape {s} for 2 positions", "  cos/sin 的数据类型 {d}，2 个位置的形状 {s}",
    d=cos_big.dtype, s=cos_shape)


# %% [markdown]
# ## Plots / 图
# `--plot` draws the wavelength of every pair and the score curve of section 5 (distances 0..255).
# `--plot` 画出每一对的波长，以及第 5 节的分数曲线（距离 0..255）。

# %%
if ch.args.plot:
    plt = ch.pyplot()
    if plt is not None:
        tiny_note = ch.label(" (tiny checkpoint: made-up numbers)", "（小检查点：数值是编造的）") if ch.tiny else ""
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4))
        a1.semilogy(range(len(lam)), lam.numpy(), "o-", ms=3, label=ch.label("this checkpoint", "本检查点"))
        if ch.tiny and inventory:
            real = wavelengths(REAL["rotary_dim"], REAL["theta"])
            a1.semilogy(range(len(real)), real.numpy(), ".-", ms=3,
                        label=ch.label("Qwen3.5-0.8B (from its config)", "Qwen3.5-0.8B（由其配置算出）"))
            a1.axhline(REAL["context"], color="C1", ls=":", label=ch.label("its context length", "它的上下文长度"))
        a1.axhline(CONTEXT, color="gray", ls="--", label=ch.label("context length (this checkpoint)", "上下文长度（本检查点）"))
        a1.set_xlabel(ch.label("pair i", "第 i 对"))
        a1.set_ylabel(ch.label("tokens per turn (2 pi / f_i)", "转一圈的词元数（2 pi / f_i）"))
        a1.set_title(ch.label("RoPE wavelengths", "RoPE 各对的波长"))
        a1.legend()
        a2.plot(range(256), curve[:256].numpy(), lw=0.8)
        a2.axhline(fixed, color="gray", ls="--", label=ch.label("unrotated part", "不旋转的部分"))
        a2.set_xlabel(ch.label("distance m - n (tokens)", "距离 m - n（词元）"))
        a2.set_ylabel("q(m) . k(n)")
        a2.set_title(ch.label("Score against distance, layer {l} head 0", "分数随距离变化，第 {l} 层第 0 头", l=layer)
                     + ("\n" + tiny_note.strip(" （）()") if tiny_note else ""), fontsize=10)
        a2.legend()
        ch.save(fig, "ch04_rope.png")

# %% [markdown]
# ## How to explain it / 怎么讲清楚
# RoPE writes a token's position into its query and key as an angle: pair i turns by position x f_i.
# A dot product of two turned vectors depends only on the difference of their angles, so attention
# sees distances, not absolute places. Qwen3.5 turns 64 of each head's 256 entries, with frequencies
# from one radian per token down to a turn every 38 million tokens, and leaves 192 entries for content.
#
# RoPE 把词元的位置以角度的形式写进查询和键：第 i 对转过 位置 x f_i。两个旋转过的向量的点积只取决于
# 角度之差，所以注意力看到的是距离，而不是绝对位置。Qwen3.5 在每个头的 256 个数里旋转 64 个，
# 频率从每个词元一弧度到每 3800 万个词元一圈，其余 192 个数留给内容。
#
# ## Summary / 小结
# - `RotaryEmbedding(cfg)(positions)` -> (cos, sin) in fp32; `apply_rope(x, cos, sin)` rotates the
#   first rotary_dim entries (rotate-half) and passes the rest through.
# - Rotations keep lengths; scores depend only on m - n; multimodal RoPE is plain RoPE for text
#   (plain RoPE is the special case t = h = w of the 3D RoPE of chapter 11).
# - Practice: `python practice/judge.py 207` (RoPE with partial rotation).
#
# - `RotaryEmbedding(cfg)(positions)` -> fp32 的 (cos, sin)；`apply_rope(x, cos, sin)` 旋转前
#   rotary_dim 个数（rotate-half），其余原样通过。
# - 旋转不改变长度；分数只取决于 m - n；对文本来说多模态 RoPE 就是普通 RoPE
#   （普通 RoPE 是第 11 章 3D RoPE 在 t = h = w 时的特例）。
# - 练习：`python practice/judge.py 207`（部分旋转的 RoPE）。

# %%
section(8, "Summary", "小结")
say("  RoPE: {p} pairs per head turn by position x f_i; {rest} entries pass through; only m - n reaches the score.",
    "  RoPE：每个头 {p} 对按位置 x f_i 旋转；{rest} 个数原样通过；分数只看到 m - n。", p=pairs_rotated, rest=unrotated)
say("  Next: chapter 5, the MLP. Practice: python practice/judge.py 207",
    "  下一章：第 5 章，MLP。练习：python practice/judge.py 207")
