# %% [markdown]
# # Chapter 3 · Three normalizations / 第 3 章 · 三种归一化
#
# Every sublayer of Qwen3.5 reads its input through an RMSNorm. This chapter writes the three
# normalizations the model uses (`qwen/norm.py`: zero-centred RMSNorm, gated RMSNorm, l2norm),
# loads them from the checkpoint, and looks at what they do to the scale of a vector, why the
# file stores `w` and the norm multiplies by `1 + w`, and how RMSNorm relates to LayerNorm.
#
# Qwen3.5 的每个子层都先让输入经过 RMSNorm。本章写出模型用到的三种归一化（`qwen/norm.py`：
# 零中心的 RMSNorm、带门的 RMSNorm、L2 归一化），从检查点加载它们，看它们如何改变向量的尺度、
# 为什么文件里存 `w` 而归一化乘以 `1 + w`，以及均方根归一化与层归一化的关系。
#
# Run: `python ch03_norm.py [--model PATH] [--tiny] [--lang zh] [--plot]`

# %%
import torch
import torch.nn.functional as F

import qwen.norm
from engine.cli import chapter, pad, say, section, show_code
from engine.known import CH03, real_inventory
from qwen.lang import tr
from qwen.model import model_norms
from qwen.norm import GatedRMSNorm, RMSNorm, l2norm
from qwen.weights import load

ch = chapter("Chapter 3: three normalizations", "第 3 章：三种归一化", plot=True)


# %% [markdown]
# ## The code / 代码
# What this chapter is about, the two RMSNorms and l2norm: `qwen/norm.py`, the whole file, read from the
# module itself (never a second copy): shown in a notebook, printed with `--code`, else where it is.
#
# 本章讲的东西：两种 RMSNorm 和 L2 归一化：`qwen/norm.py` 的完整文件，直接从模块读出（不是另一份拷贝）：
# notebook 里直接显示，`--code` 打印，否则只说它在哪里。

# %%
taught = show_code(ch, qwen.norm)
cfg, W = ch.cfg, ch.W
H, EPS = cfg.hidden_size, cfg.rms_norm_eps
torch.manual_seed(0)
x = torch.randn(2, 3, H) * 5                # 2 x 3 vectors of RMS about 5 (the same draw as the recorded run)
g = torch.Generator().manual_seed(1)        # every other random draw
REAL = real_inventory() if ch.tiny else None   # Qwen3.5-0.8B's published inventory


def rms(t):
    """Root mean square along the last dimension, in fp32: (...)."""
    return t.float().pow(2).mean(-1).sqrt()


def first3(t):
    return [round(v, 2) for v in rms(t).flatten()[:3].tolist()]


def real(en, zh, **fields):
    """After a tiny-checkpoint figure: what Qwen3.5-0.8B shows (the original course's recorded run)."""
    if ch.tiny:
        say("  Qwen3.5-0.8B (recorded): " + en, "  Qwen3.5-0.8B（实测记录）：" + zh, **fields)


# %% [markdown]
# ## 1. What RMSNorm does / RMSNorm 做了什么
# y = x / sqrt(mean(x^2) + eps) * (1 + w): divide each vector by its root mean square, then
# scale each dimension. eps sits inside the root, as in LLaMA's and transformers' code (and in
# the code of a popular article whose formula puts it outside: x / (RMS(x) + eps)). The two
# differ visibly only for vectors whose RMS is near or below sqrt(eps) = 0.001.
#
# y = x / sqrt(mean(x^2) + eps) * (1 + w)：每个向量除以自己的均方根，再逐维缩放。eps 在根号里，
# 与 LLaMA 和 transformers 的代码一致（一篇流传很广的文章，代码里也在根号里，公式却写在根号外：
# x / (RMS(x) + eps)）。两者只在均方根接近或小于 sqrt(eps) = 0.001 的向量上有明显区别。

# %%
section(1, "RMSNorm rescales every vector to an RMS of 1", "RMSNorm 把每个向量缩放到均方根为 1")
plain = RMSNorm(H, EPS)                     # w = 0: a scale of exactly 1
before, after = first3(x), first3(plain(x))
direction = F.cosine_similarity(x[0, 0], plain(x)[0, 0], dim=0).item()
say("  RMS before: {a}; after RMSNorm with w = 0: {b}", "  之前的均方根：{a}；经过 w = 0 的 RMSNorm 之后：{b}", a=before, b=after)
say("  cosine(x, RMSNorm(x)) = {c:.6f}: the direction is kept", "  cosine(x, RMSNorm(x)) = {c:.6f}：方向不变", c=direction)
v = torch.tensor([1.0, 2.0, 3.0, 4.0])
by_hand = v / v.pow(2).mean().sqrt()                                 # squares 1, 4, 9, 16; mean 7.5; root 2.7386
by_module = RMSNorm(4, EPS)(v)
hand4, module4 = [round(e, 4) for e in by_hand.tolist()], [round(e, 4) for e in by_module.tolist()]
say("  by hand, [1, 2, 3, 4] / sqrt(7.5) = {y}; RMSNorm(4) gives {n}", "  手算 [1, 2, 3, 4] / sqrt(7.5) = {y}；RMSNorm(4) 给出 {n}",
    y=hand4, n=module4)
small = torch.full((4,), 1e-3)
inside, outside = rms(RMSNorm(4, EPS)(small)).item(), rms(small / (rms(small) + EPS)).item()
say("  a vector of RMS 0.001: eps inside the root -> RMS {a:.3f}; outside (the article's formula) -> {b:.3f}",
    "  均方根为 0.001 的向量：eps 在根号里 -> 均方根 {a:.3f}；在根号外（文章的公式）-> {b:.3f}", a=inside, b=outside)


# %% [markdown]
# ## 2. The file stores w, the norm multiplies by 1 + w / 文件存 w，归一化乘以 1 + w
# Zero-centred weights (Qwen3.5, and Gemma before it): a fresh norm stores 0, which means a
# scale of 1. Two reasons. Weight decay pulls every stored value towards 0: here that pulls the
# scale towards 1 (leave the vector alone), not towards 0 (erase it). And bf16 is fine near 0 and
# coarse near 1: the gap between neighbours doubles at every power of two, so small learned
# changes to a value near 1 are rounded away.
#
# 零中心的权重（Qwen3.5，之前的 Gemma 也这样）：新的归一化存 0，表示缩放为 1。两个原因：
# 权重衰减把每个存储值往 0 拉，在这里就是把缩放往 1 拉（不改动向量），而不是往 0 拉（抹掉向量）；
# 另外 bf16 在 0 附近精细、在 1 附近粗糙：每过一个 2 的幂，相邻数的间隔就翻倍，1 附近的小改动会被舍入掉。

# %%
section(2, "Why the scale is stored as w, applied as 1 + w", "为什么缩放存成 w、用的时候乘 1 + w")
for value in (1.0, 0.25, 0.001):
    b = torch.tensor(value).bfloat16()
    stored = b.item()
    up = (torch.nextafter(b, torch.tensor(float("inf"), dtype=torch.bfloat16)) - b).float().item()
    say("  next bf16 number above {v:g}: {gap:.3g} away", "  {v:g} 之上的下一个 bf16 数：相差 {gap:.3g}", v=stored, gap=up)
lost, kept = torch.tensor(1.001).bfloat16().item(), torch.tensor(0.001).bfloat16().item()
say("  1 + 0.001 in bf16 -> {a:.4f} (the update is lost); 0.001 in bf16 -> {b:.6f} (kept)",
    "  bf16 存 1 + 0.001 得到 {a:.4f}（更新被吞掉）；存 0.001 得到 {b:.6f}（保留下来）", a=lost, b=kept)
w0 = W["layers.0.input_layernorm.weight"].float()
as_scale = (1 + w0).bfloat16().float() - 1          # what storing the scale itself would keep of w
changed, by_up_to = (as_scale != w0).float().mean().item(), (as_scale - w0).abs().max().item()
say("  storing 1 + w instead of w would change {c:.0%} of layers.0.input_layernorm's values, by up to {m:.1e}",
    "  如果存 1 + w 而不是 w，layers.0.input_layernorm 的数值会有 {c:.0%} 改变，最大改变 {m:.1e}", c=changed, m=by_up_to)


# %% [markdown]
# ## 3. The learned scales / 学到的缩放
# Layer 0's input norm and the final norm, on the same inputs. The final norm feeds the logits
# (chapter 2: logit = h . E[i]). It does not bring h to the size of the table's rows: h ends far
# larger than them. The rows are small, so with h at RMS 1 the logits would be small and the
# softmax nearly flat; multiplying h by s multiplies every logit by s. So the final scale
# compensates for the small rows and sets the softmax's temperature (chapter 2, section 6).
#
# 第 0 层的输入归一化和最后的归一化，用同样的输入。最后的归一化的输出直接去算 logits（第 2 章：
# logit = h . E[i]）。它并不是把 h 调到与嵌入表的行一样大：h 比行大得多。行很小，如果 h 的均方根是 1，
# logits 也会很小，softmax 几乎是平的；h 乘以 s，每个 logit 就乘以 s。所以最后的缩放弥补了行的小，
# 并决定 softmax 的温度（第 2 章第 6 节）。

# %%
section(3, "The scales this checkpoint stores", "这个检查点存的缩放")          # learned only on trained weights
norm0 = load(RMSNorm(H, EPS), W, "layers.0.input_layernorm.")
final = load(RMSNorm(H, EPS), W, "norm.")
after_norm0, after_final = first3(norm0(x)), first3(final(x))
say("  RMS after layers.0.input_layernorm: {a}; after the final norm: {b}",
    "  经过 layers.0.input_layernorm 后的均方根：{a}；经过最后的归一化后：{b}", a=after_norm0, b=after_final)
real("{a}; {b}", "{a}；{b}", a=CH03["after_layer0_input_norm"], b=CH03["after_final_norm"])
for key, known in (("layers.0.input_layernorm.weight", CH03["layer0_w"]), ("norm.weight", CH03["final_w"])):
    w = W[key].float()
    column, mean, lo, hi = pad(key, 32), w.mean().item(), w.min().item(), w.max().item()
    say("  {k} stored w: mean {m:+.3f}, range [{lo:+.2f}, {hi:+.2f}]", "  {k} 存储的 w：均值 {m:+.3f}，范围 [{lo:+.2f}, {hi:+.2f}]",
        k=column, m=mean, lo=lo, hi=hi)
    real("{k} mean {m:+.3f}, range [{lo:+.2f}, {hi:+.2f}]", "{k} 均值 {m:+.3f}，范围 [{lo:+.2f}, {hi:+.2f}]",
         k=key, m=known["mean"], lo=known["min"], hi=known["max"])
rows = torch.randint(0, cfg.vocab_size, (512,), generator=g)
E = W.rows("embed_tokens.weight", rows).float()                     # (512, H): 512 rows read from the file
h1, hf = plain(x[0, 0]), final(x[0, 0])                              # the same vector, scale 1 and the final scale
rms_rows, rms_h = rms(E).mean().item(), rms(hf).item()
say("  RMS of 512 rows of E: {e:.3f}; RMS(h) after the final norm: {h:.2f}", "  E 的 512 行的均方根：{e:.3f}；最后的归一化之后 RMS(h)：{h:.2f}",
    e=rms_rows, h=rms_h)
spread1, spread_final = (E @ h1).std().item(), (E @ hf).std().item()
ratio = spread_final / spread1
say("  logits' spread over those rows: {a:.3f} with scale 1, {b:.3f} with the final scale ({r:.1f} times)",
    "  这些行上 logits 的离散程度：缩放为 1 时 {a:.3f}，用最后的缩放时 {b:.3f}（{r:.1f} 倍）", a=spread1, b=spread_final, r=ratio)
real_scale = 1 + CH03["final_w"]["mean"]
real("the final scale 1 + w averages {s:.2f}; RMS(h) after it {h} (after a scale of 1: 1.00)",
     "最后的缩放 1 + w 平均为 {s:.2f}；之后 RMS(h) 为 {h}（缩放为 1 时是 1.00）", s=real_scale, h=CH03["after_final_norm"][0])


# %% [markdown]
# ## 4. Precision: bf16 in, bf16 out, statistics in fp32 / 精度：bf16 进、bf16 出，统计量升到 fp32
# Squaring and averaging in bf16 loses digits, so every implementation upcasts the statistics to
# fp32. Where the cast back goes differs: Qwen3.5 (and our `RMSNorm`) multiplies by 1 + w in fp32
# and rounds once; LLaMA rounds the normalized vector first, then multiplies by its weight;
# `F.rms_norm` with a bf16 `weight = 1 + w` rounds 1 + w itself. Exercise 204 checks the order.
#
# 在 bf16 里求平方和平均会丢精度，所以所有实现都把统计量升到 fp32。回到 bf16 的位置不同：Qwen3.5（和我们的
# `RMSNorm`）在 fp32 里乘 1 + w，只舍入一次；LLaMA 先舍入归一化后的向量，再乘权重；`F.rms_norm` 用 bf16 的
# `weight = 1 + w` 时，1 + w 本身先被舍入。练习 204 检查这个顺序。

# %%
section(4, "bf16 in, bf16 out; the statistics upcast to fp32", "bf16 输入、bf16 输出；统计量升到 fp32")
wq, xb = W["layers.0.input_layernorm.weight"], x.bfloat16()
yb = norm0(xb)
xd = xb.double()                                                     # float64 reference on the same bf16 inputs
ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + EPS) * (1 + wq.double())
all_bf16 = xb * torch.rsqrt(xb.pow(2).mean(-1, keepdim=True) + EPS) * (1 + wq.bfloat16())
e32, e16 = (yb.double() - ref).abs().max().item(), (all_bf16.double() - ref).abs().max().item()
ratio = e16 / max(e32, 1e-30)
say("  input {a} -> output {b}", "  输入 {a} -> 输出 {b}", a=xb.dtype, b=yb.dtype)
say("  max error against float64: statistics in fp32 {a:.1e}; everything in bf16 {b:.1e} (ratio {r:.1f})",
    "  与 float64 相比的最大误差：统计量用 fp32 {a:.1e}；全部用 bf16 {b:.1e}（比值 {r:.1f}）", a=e32, b=e16, r=ratio)
normed = (xb.float() * torch.rsqrt(xb.float().pow(2).mean(-1, keepdim=True) + EPS))
llama = normed.bfloat16() * (1 + wq.float()).bfloat16()             # round first, then the weight, in bf16
fused = F.rms_norm(xb, (H,), weight=(1 + wq).bfloat16(), eps=EPS)   # 1 + w rounded to bf16
exact = F.rms_norm(xb.float(), (H,), weight=1 + wq.float(), eps=EPS).bfloat16()
differ = {name: (y != yb).float().mean().item() for name, y in (("llama", llama), ("fused", fused), ("exact", exact))}
say("  bf16 outputs that differ from ours: LLaMA's order {a:.0%}; F.rms_norm, bf16 1 + w {b:.0%}; "
    "F.rms_norm in fp32, 1 + w.float() {c:.0%}",
    "  与我们的结果不同的 bf16 输出：LLaMA 的顺序 {a:.0%}；F.rms_norm 用 bf16 的 1 + w {b:.0%}；"
    "F.rms_norm 在 fp32 中、用 1 + w.float() {c:.0%}",
    a=differ["llama"], b=differ["fused"], c=differ["exact"])


# %% [markdown]
# ## 5. The gated RMSNorm / 带门的 RMSNorm
# Linear attention's output (chapter 7): y = x / rms(x) * w * silu(z), the gate z = in_proj_z(x)
# computed from the layer's input. Here w is the scale itself (1 at init), one [head size] weight
# shared by all heads. A very negative gate silences a head. transformers rounds the normalized
# value before the weight; we round once: bit-identical in fp32, within 2 bf16 steps in bf16.
#
# 线性注意力的输出（第 7 章）：y = x / rms(x) * w * silu(z)，门 z = in_proj_z(x) 由这一层的输入算出。
# 这里 w 就是缩放本身（初始为 1），所有头共用一个 [头维度] 的权重。门很负时这个头几乎没有输出。
# transformers 在乘权重之前先舍入；我们只舍入一次：fp32 下逐位相同，bf16 下相差不超过 2 个 bf16 间隔。

# %%
section(5, "Gated RMSNorm: normalize, then a gate decides how much passes", "带门的 RMSNorm：先归一化，再由门决定放行多少")
L0, DV = cfg.linear_attention_layers[0], cfg.linear_value_head_dim
gated = load(GatedRMSNorm(DV, EPS), W, f"layers.{L0}.linear_attn.norm.")
head = torch.randn(4, DV, generator=g)                               # 4 head outputs
gated_dtype, gated_mean = W.dtype(f"layers.{L0}.linear_attn.norm.weight"), gated.weight.float().mean().item()
say("  layers.{l}.linear_attn.norm.weight: {dt}, mean {m:.3f}", "  layers.{l}.linear_attn.norm.weight：{dt}，均值 {m:.3f}",
    l=L0, dt=gated_dtype, m=gated_mean)
for gate in (-6.0, 0.0, 6.0):
    out_rms = rms(gated(head, torch.full_like(head, gate))).mean().item()
    silu = F.silu(torch.tensor(gate)).item()
    say("  gate = {z:+.0f}: output RMS {r:.3f} (silu = {s:.3f})", "  门 = {z:+.0f}：输出的均方根 {r:.3f}（silu = {s:.3f}）",
        z=gate, r=out_rms, s=silu)
Wz = W[f"layers.{L0}.linear_attn.in_proj_z.weight"]
z = x[0].to(Wz.dtype) @ Wz.T                                         # (3, heads * DV)
z = z.float().view(3, -1, DV)                                        # (tokens, value heads, DV)
n_tokens, n_heads = z.shape[:2]
silu_mean = F.silu(z).mean().item()
say("  z = in_proj_z(x): {n} tokens x {k} heads x {d}; silu(z) mean {s:.3f}", "  z = in_proj_z(x)：{n} 个词元 x {k} 个头 x {d}；silu(z) 的均值 {s:.3f}",
    n=n_tokens, k=n_heads, d=DV, s=silu_mean)


# %% [markdown]
# ## 6. l2norm, and q_norm / k_norm / L2 归一化，以及 q_norm / k_norm
# Linear attention (chapter 7) scales q and k to unit length in fp32: x * rsqrt(sum(x^2) + 1e-6),
# eps added to the sum inside the root, so near-zero vectors shrink instead of blowing up. Full
# attention (chapter 6) normalizes q and k with RMSNorms of size head_dim, per head (each
# (token, head) vector on its own), before RoPE.
#
# 线性注意力（第 7 章）在 fp32 中把 q 和 k 缩放到单位长度：x * rsqrt(sum(x^2) + 1e-6)，eps 加在根号里的
# 平方和上，所以接近 0 的向量只会被缩小、不会被放大。全注意力（第 6 章）用大小为 head_dim 的 RMSNorm
# 按头归一化 q 和 k（每个 (词元, 头) 向量各自归一化），在 RoPE 之前。

# %%
section(6, "l2norm, and the per-head q/k norms", "L2 归一化，以及按头的 q/k 归一化")
lengths = [round(e, 3) for e in l2norm(x).norm(dim=-1).flatten()[:3].tolist()]
say("  lengths after l2norm: {l}", "  L2 归一化之后的长度：{l}", l=lengths)
tiny_vector = torch.full((128,), 1e-4)
tiny_length, tiny_after, zero_after = tiny_vector.norm().item(), l2norm(tiny_vector).norm().item(), l2norm(torch.zeros(3)).tolist()
say("  a vector of length {n:.1e} -> length {a:.4f}; the zero vector -> {z}", "  长度 {n:.1e} 的向量 -> 长度 {a:.4f}；零向量 -> {z}",
    n=tiny_length, a=tiny_after, z=zero_after)
F0, QH = cfg.full_attention_layers[0], cfg.num_attention_heads
q_norm = load(RMSNorm(cfg.head_dim, EPS), W, f"layers.{F0}.self_attn.q_norm.")
q = torch.randn(3, QH, cfg.head_dim, generator=g) * torch.arange(1, QH + 1)[:, None]   # head i at RMS about i
q_before, q_after = [round(v, 2) for v in rms(q)[0].tolist()], [round(v, 2) for v in rms(q_norm(q))[0].tolist()]
say("  q (3 tokens, {k} heads, {d}): RMS per head {a} -> after q_norm {b}", "  q（3 个词元，{k} 个头，{d}）：每个头的均方根 {a} -> q_norm 之后 {b}",
    k=QH, d=cfg.head_dim, a=q_before, b=q_after)


# %% [markdown]
# ## 7. LayerNorm and RMSNorm / 层归一化与均方根归一化
# LayerNorm subtracts the mean, divides by the standard deviation, scales and adds a bias; RMSNorm
# only divides by the RMS. RMS^2 = sigma^2 + mu^2, so they agree when the mean is near 0. Zhang and
# Sennrich (2019) proposed it on the hypothesis that re-centering is not what makes LayerNorm
# work; LLaMA, Qwen, Gemma and Mistral use it. The textbook LayerNorm takes two reductions (mean,
# then variance), RMSNorm one; one-pass kernels get both sums at once. Fewer reductions is not
# speed by itself: on CPU, in this torch, LayerNorm is one fused kernel and F.rms_norm six ops
# (tests/test_norm.py checks it; bench/bench_norm.py times them).
#
# 层归一化减均值、除以标准差、再缩放加偏置；均方根归一化只除以均方根。RMS^2 = sigma^2 + mu^2，所以均值
# 接近 0 时两者一致。Zhang 和 Sennrich（2019）提出它，假设层归一化有效的原因不在重新中心化；LLaMA、Qwen、
# Gemma、Mistral 都用它。教科书式的层归一化要两次归约（先均值再方差），均方根归一化一次；单遍的内核一次
# 得到两个和。归约少不等于更快：在 CPU 上、这个版本的 torch 里，层归一化是一个融合内核，F.rms_norm 是
# 六个运算（tests/test_norm.py 检查；bench/bench_norm.py 计时）。

# %%
section(7, "LayerNorm against RMSNorm: RMS^2 = sigma^2 + mu^2", "层归一化与均方根归一化：RMS^2 = sigma^2 + mu^2")
mu, var, ms = E.mean(-1), E.var(-1, unbiased=False), E.pow(2).mean(-1)
identity_gap, mean_share = (ms - (var + mu * mu)).abs().max().item(), (mu.abs() / ms.sqrt()).mean().item()
say("  512 rows of E: max |RMS^2 - (sigma^2 + mu^2)| = {d:.1e}; mean |mu| / RMS = {r:.3f}",
    "  E 的 512 行：max |RMS^2 - (sigma^2 + mu^2)| = {d:.1e}；平均 |mu| / RMS = {r:.3f}", d=identity_gap, r=mean_share)
for shift in (0.0, 3 * rms(E).mean().item()):
    ln, rn = F.layer_norm(E + shift, (H,), eps=EPS), F.rms_norm(E + shift, (H,), eps=EPS)
    agree = F.cosine_similarity(ln, rn, dim=-1).mean().item()
    say("  rows + {s:.3f}: cosine(LayerNorm, RMSNorm) = {c:.4f}", "  各行加上 {s:.3f}：cosine(LayerNorm, RMSNorm) = {c:.4f}",
        s=shift, c=agree)


# %% [markdown]
# ## 8. Pre-Norm and Post-Norm / 前置归一化与后置归一化
# Qwen3.5 is Pre-Norm: x + f(norm(x)). The residual stream itself is never normalized, so the
# input reaches the last layer unchanged inside the sum, and the stream grows; hence the final
# norm after the last layer. Post-Norm, norm(x + f(x)), rescales the stream after every layer.
# A toy stack of 24 random linear sublayers shows exactly these two facts. The usual training
# argument (Pre-Norm trains stably without learning-rate warm-up; Xiong et al., 2020) is about
# training, which this untrained toy does not show.
#
# Qwen3.5 用前置归一化：x + f(norm(x))。残差流本身从不被归一化，所以输入原样包含在求和里一直到最后一层，
# 残差流也会变大；因此最后一层之后还要一个最终的归一化。后置归一化 norm(x + f(x)) 在每层之后都重新缩放残差流。
# 一个由 24 个随机线性子层组成的玩具网络正好显示这两点。通常说的训练上的理由（前置归一化不需要学习率预热
# 也能稳定训练；Xiong 等，2020）是关于训练的，这个没训练过的玩具显示不了。

# %%
section(8, "Pre-Norm (Qwen3.5) against Post-Norm, on a toy 24-layer stack", "前置归一化（Qwen3.5 的做法）与后置归一化：24 层的玩具网络")
D = 256
blocks = [torch.randn(D, D, generator=g) / D ** 0.5 for _ in range(24)]   # stand-ins for sublayers
x0 = torch.randn(64, D, generator=g)
for pre, en, zh in ((True, "Pre-Norm ", "前置归一化"), (False, "Post-Norm", "后置归一化")):
    z, seen = x0, []
    for Wl in blocks:
        z = z + RMSNorm(D)(z) @ Wl if pre else RMSNorm(D)(z + z @ Wl)
        seen.append((rms(z).mean().item(), F.cosine_similarity(z, x0, dim=-1).mean().item()))
    (r1, c1), (r12, c12), (r24, c24) = seen[0], seen[11], seen[23]
    say("  {n}: stream RMS after layers 1/12/24 = {a:.2f}/{b:.2f}/{c:.2f}; cosine with the input {d:.3f}/{e:.3f}/{f:.3f}",
        "  {n}：第 1/12/24 层之后残差流的均方根 = {a:.2f}/{b:.2f}/{c:.2f}；与输入的余弦 {d:.3f}/{e:.3f}/{f:.3f}",
        n=tr(en, zh), a=r1, b=r12, c=r24, d=c1, e=c12, f=c24)


# %% [markdown]
# ## 9. Every normalization of the model / 模型里所有的归一化
# `qwen.model.model_norms` walks the config: two RMSNorms per layer plus the final one, a q_norm
# and a k_norm in each full-attention layer, a gated RMSNorm in each linear-attention layer:
# 49 + 12 + 18 = 79 in Qwen3.5-0.8B's language model. The vision tower has LayerNorms of its own
# (chapter 10 builds it); the multi-token-prediction head has 7 more RMSNorms (chapter 12 uses
# it). `--plot` draws the scales.
#
# `qwen.model.model_norms` 按配置逐层构建：每层两个 RMSNorm 加最后一个，每个全注意力层一个 q_norm 和
# 一个 k_norm，每个线性注意力层一个带门的 RMSNorm：Qwen3.5-0.8B 的语言模型里 49 + 12 + 18 = 79 个。
# 视觉塔有自己的层归一化（第 10 章搭建它）；多词元预测头里还有 7 个 RMSNorm（第 12 章用到它）。`--plot` 把缩放画出来。

# %%
section(9, "Every normalization in the model, built from the config", "根据配置构建模型里所有的归一化")
norms = model_norms(cfg, W)                 # {prefix: module}, each loaded strictly from its own weight
qk = sum("self_attn" in k for k in norms)
gated_n = sum(isinstance(m, GatedRMSNorm) for m in norms.values())
stream, total = len(norms) - qk - gated_n, len(norms)
say("  language model: {a} residual-stream RMSNorms + {b} q/k RMSNorms + {c} gated RMSNorms = {n}",
    "  语言模型：残差流上 {a} 个 RMSNorm + {b} 个 q/k RMSNorm + {c} 个带门的 RMSNorm = {n} 个",
    a=stream, b=qk, c=gated_n, n=total)


def norm_weights(names, prefix):
    return sum(n.startswith(prefix) and "norm" in n and n.endswith(".weight") for n in names)


vision_norms, mtp_norms = norm_weights(W.all_names, "model.visual."), norm_weights(W.all_names, "mtp.")
say("  vision tower: {k} LayerNorms (chapter 10)", "  视觉塔：{k} 个层归一化（第 10 章）", k=vision_norms)
say("  MTP head: {m} RMSNorms (chapter 12)", "  多词元预测头：{m} 个 RMSNorm（第 12 章）", m=mtp_norms)
if REAL:
    real_vision, real_mtp = norm_weights(REAL["tensors"], "model.visual."), norm_weights(REAL["tensors"], "mtp.")
    say("  Qwen3.5-0.8B (published inventory): 79 in the language model; {v} LayerNorms in the vision tower; "
        "{m} RMSNorms in the MTP head",
        "  Qwen3.5-0.8B（公开的张量清单）：语言模型里 79 个；视觉塔里 {v} 个层归一化；多词元预测头里 {m} 个 RMSNorm",
        v=real_vision, m=real_mtp)
say("  1 + w per layer, mean (input_layernorm / post_attention_layernorm):", "  每层的 1 + w 均值（input_layernorm / post_attention_layernorm）：")
scale = {k: 1 + m.weight.detach().float() for k, m in norms.items()}
pairs = [f"{i}: {scale[f'layers.{i}.input_layernorm'].mean():.2f}/{scale[f'layers.{i}.post_attention_layernorm'].mean():.2f}"
         for i in range(cfg.num_hidden_layers)]
for start in range(0, len(pairs), 6):
    line = "   ".join(pairs[start:start + 6])
    say("  {p}", "  {p}", p=line)

if ch.args.plot and (plt := ch.pyplot()):
    warn = "\n" + ch.label("(tiny checkpoint: made-up numbers)", "（小检查点：数值是编造的）") if ch.tiny else ""
    fig, axes = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    for ax, kind in zip(axes, ("input_layernorm", "post_attention_layernorm")):
        ax.boxplot([scale[f"layers.{i}.{kind}"].numpy() for i in range(cfg.num_hidden_layers)],
                   positions=range(cfg.num_hidden_layers), showfliers=False)
        ax.axhline(1.0, color="gray", lw=0.8, ls="--")
        ax.set_ylabel(f"1 + w\n({kind})", fontsize=9)
    axes[-1].set_xlabel(ch.label("layer", "层"))
    fig.suptitle(ch.label("Effective RMSNorm scale 1 + w per layer", "每层 RMSNorm 的有效缩放 1 + w") + warn)
    ch.save(fig, "ch03_layer_scales.png")
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.hist(scale["norm"].numpy(), bins=max(5, min(60, int(H ** 0.5))))          # about sqrt(values) bins
    ax.set(title=ch.label("Final norm: the scale 1 + w of each dimension", "最后的归一化：每一维的缩放 1 + w") + warn,
           xlabel="1 + w", ylabel=ch.label("dimensions", "维数"))
    ch.save(fig, "ch03_final_norm.png")


# %% [markdown]
# ## How to explain it / 怎么讲给别人听
# RMSNorm divides each vector by its root mean square and scales each dimension: LayerNorm
# without the mean and the bias. Two engineering details: the statistics are upcast to fp32, and
# Qwen3.5 (like Gemma) stores w and multiplies by 1 + w, so that weight decay pulls towards a
# scale of 1 and bf16 keeps small changes. Pre-Norm keeps the residual stream a plain sum, so a
# final norm sets its size before the logits.
#
# 均方根归一化把每个向量除以它的均方根，再逐维缩放：就是去掉均值和偏置的层归一化。两个工程细节：统计量
# 升到 fp32 计算；Qwen3.5（和 Gemma 一样）存 w、乘 1 + w，这样权重衰减把缩放拉向 1，bf16 也能留住小改动。
# 前置归一化让残差流保持为简单的求和，所以最后要一个归一化在算 logits 之前确定它的大小。
#
# ## Summary / 小结
# - RMSNorm: y = x / sqrt(mean(x^2) + eps) * (1 + w); GatedRMSNorm: y = x / rms(x) * w * silu(z);
#   l2norm: x * rsqrt(sum(x^2) + eps).
# - fp32 statistics, one cast at the end; the order of the cast and the weight changes bf16 results.
# - 79 norms in Qwen3.5-0.8B's language model: 49 on the residual stream, 12 per-head q/k, 18 gated.
#
# - 均方根归一化：y = x / sqrt(mean(x^2) + eps) * (1 + w)；带门的：y = x / rms(x) * w * silu(z)；
#   L2 归一化：x * rsqrt(sum(x^2) + eps)。
# - 统计量升到 fp32，最后舍入一次；舍入与乘权重的先后会改变 bf16 的结果。
# - Qwen3.5-0.8B 的语言模型里 79 个归一化：残差流上 49 个，按头的 q/k 12 个，带门的 18 个。

# %%
say("\nExercises for this chapter: 204, 205, 206. Try one: python practice/judge.py 204",
    "\n本章练习：204、205、206。试一个：python practice/judge.py 204")
