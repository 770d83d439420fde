# %% [markdown]
# # Chapter 5 · The SwiGLU MLP / 第 5 章 · SwiGLU MLP
#
# After attention has mixed information between tokens, every layer gives each token, alone, to
# an MLP. Qwen3.5's is a SwiGLU: two projections of the same input, one of them passed through
# silu and used as a gate on the other, then a projection back (`qwen/mlp.py`):
#
#     MLP(x) = down( silu(gate(x)) * up(x) ),   silu(z) = z * sigmoid(z)
#
# This chapter computes it by hand on the real layer-0 weights, counts what it costs in
# parameters, looks at what the gate does to the hidden units of real tokens, and times a bf16
# against an fp32 matmul on this CPU.
#
# 注意力在词元之间交换信息之后，每一层把每个词元单独交给一个 MLP。Qwen3.5 用的是 SwiGLU：
# 对同一个输入做两次投影，一个经过 silu 后作为门去乘另一个，再投影回来（`qwen/mlp.py`）。
# 本章在真实的第 0 层权重上手算它，数它占多少参数，看门对真实词元的隐藏单元做了什么，
# 并在这台 CPU 上比较 bf16 和 fp32 矩阵乘法的耗时。
#
# Run: `python ch05_mlp.py [--model PATH] [--tiny] [--lang zh]`

# %%
import inspect
import time

import torch
import torch.nn.functional as F

import qwen.mlp
from engine.cli import chapter, count, say, section, show_code
from engine.known import real_inventory
from engine.threads import choose, note, use
from qwen.lang import tr
from qwen.mlp import MLP
from qwen.model import load_model
from qwen.norm import RMSNorm
from qwen.config import Config
from qwen.weights import load, short_name

ch = chapter("Chapter 5: the SwiGLU MLP", "第 5 章：SwiGLU MLP")


# %% [markdown]
# ## The code / 代码
# What this chapter is about, the SwiGLU MLP: `qwen/mlp.py`, the whole file, read from the
# module itself (never a second copy): shown in a notebook, printed with `--code`, else where it is.
#
# 本章讲的东西：SwiGLU MLP：`qwen/mlp.py` 的完整文件，直接从模块读出（不是另一份拷贝）：
# notebook 里直接显示，`--code` 打印，否则只说它在哪里。

# %%
taught = show_code(ch, qwen.mlp)
cfg, W = ch.cfg, ch.W
H, I = cfg.hidden_size, cfg.intermediate_size
inventory = real_inventory()                          # Qwen3.5-0.8B's published inventory, for the lines after tiny figures
SENTENCE = "The cat sat on the mat because it was tired."
ids, names = ch.sentence(SENTENCE)                    # token ids and their readable pieces


# %% [markdown]
# ## 1. SwiGLU by hand on layer 0 / 在第 0 层上手算 SwiGLU
# The MLP reads the residual stream through `post_attention_layernorm`. The real stream at this
# point also holds layer 0's attention output (chapters 7-8); here the token embeddings stand in
# for it, normalized by the real norm. Every step is one matmul or one elementwise product.
#
# MLP 通过 `post_attention_layernorm` 读取残差流。真实的残差流此时还包含第 0 层注意力的输出
# （第 7-8 章）；这里用词元嵌入代替它，再经过真实的归一化。每一步都是一次矩阵乘法或一次逐元素乘法。

# %%
section(1, "SwiGLU by hand on layer 0", "在第 0 层上手算 SwiGLU")
mlp = load(MLP(H, I), W, "layers.0.mlp.")
norm = load(RMSNorm(H, cfg.rms_norm_eps), W, "layers.0.post_attention_layernorm.")
x = norm(W.rows("embed_tokens.weight", ids))                                   # (T, H), bf16
Wg, Wu, Wd = (W[f"layers.0.mlp.{n}_proj.weight"] for n in ("gate", "up", "down"))
with torch.no_grad():
    g = x @ Wg.T                                                                 # (T, I)
    u = x @ Wu.T                                                                 # (T, I)
    h = F.silu(g) * u                                                            # (T, I): the gated hidden units
    y = h @ Wd.T                                                                 # (T, H)
    same = torch.equal(y, mlp(x))
shapes = [list(t.shape) for t in (x, g, h, y)]
dtype = str(y.dtype).replace("torch.", "")
say("  x {x} -> gate(x), up(x) {g} -> silu(gate) * up {h} -> down {y}   ({d})",
    "  x {x} -> gate(x)、up(x) {g} -> silu(gate) * up {h} -> down {y}（{d}）",
    x=shapes[0], g=shapes[1], h=shapes[2], y=shapes[3], d=dtype)
say("  by hand == MLP module, bit for bit: {s}", "  手算 == MLP 模块，逐位相同：{s}", s=same)
wrong = (F.silu(u) * g) @ Wd.T                                                   # silu on the wrong projection
wrong_gap, largest = (wrong.float() - y.float()).abs().max().item(), y.float().abs().max().item()
say("  silu on up instead of gate changes the output by up to {d:.3f} (of {s:.3f}): the two are not interchangeable",
    "  把 silu 用在 up 而不是 gate 上，输出最多变化 {d:.3f}（输出最大 {s:.3f}）：两者不能互换",
    d=wrong_gap, s=largest)


# %% [markdown]
# ## 2. silu: a smooth switch / silu：平滑的开关
# silu(z) = z * sigmoid(z) is about 0 for negative z and about z for large z, with a smallest value
# of -0.278 at z = -1.278. Multiplied into up(x), it switches each hidden unit off or on, and the
# switch is decided by the token itself.
#
# silu(z) = z * sigmoid(z)：z 为负时约等于 0，z 很大时约等于 z，最小值是 z = -1.278 处的 -0.278。
# 乘到 up(x) 上，它把每个隐藏单元关掉或打开，开关由词元自己决定。

# %%
section(2, "silu: a smooth switch", "silu：平滑的开关")
z = torch.tensor([-6.0, -1.2785, 0.0, 1.0, 6.0])
for label, values in (("z", z), ("silu(z)", F.silu(z)), ("relu(z)", F.relu(z))):
    row = "  ".join(f"{v:+7.3f}" for v in values.tolist())
    say("  {l:<8} {r}", "  {l:<8} {r}", l=label, r=row)
zz = torch.linspace(-10, 10, 200001, dtype=torch.float64)
silu_min, silu_min_at = F.silu(zz).min().item(), zz[F.silu(zz).argmin()].item()
say("  smallest silu on a fine grid: {m:.4f} at z = {at:.3f}", "  在细网格上 silu 的最小值：{m:.4f}，位于 z = {at:.3f}",
    m=silu_min, at=silu_min_at)


# %% [markdown]
# ## 3. Where the parameters are / 参数在哪里
# Three matrices of hidden x intermediate each, in every layer: the MLPs hold about a third of
# the language model. A third matrix costs parameters: the SwiGLU paper made the hidden layer
# 8/3 = 2.67 times as wide as the input (instead of 4) to keep a plain MLP's count; Qwen3.5 uses
# 3.5, so its MLP holds 31% more than a plain 4x one.
#
# 每层三个 hidden x intermediate 的矩阵：MLP 占了语言模型大约三分之一的参数。多一个矩阵就多一份参数：
# SwiGLU 论文把隐藏层取为输入的 8/3 = 2.67 倍（而不是 4 倍），使参数量与普通 MLP 相同；Qwen3.5 取 3.5 倍，
# 所以它的 MLP 比普通 4 倍宽的 MLP 多 31% 的参数。

# %%
section(3, "Where the parameters are", "参数在哪里")


def mlp_share(c, shapes):
    """(MLP parameters per layer, in all layers, all language-model parameters) from the config and the shapes."""
    per_layer = 3 * c.hidden_size * c.intermediate_size
    total = sum(torch.Size(shape).numel() for shape in shapes)
    return per_layer, per_layer * c.num_hidden_layers, total


per, mlps, total = mlp_share(cfg, [W.shape(n) for n in W])
share = mlps / total
say("  per layer 3 x {h} x {i} = {p}; {n} layers: {m}; all language-model tensors: {t}; MLPs: {s:.1%}",
    "  每层 3 x {h} x {i} = {p}；{n} 层：{m}；语言模型全部张量：{t}；MLP 占 {s:.1%}",
    h=H, i=I, p=count(per), n=cfg.num_hidden_layers, m=count(mlps), t=count(total), s=share)
if ch.tiny and inventory:
    real = Config.from_dict(inventory["config"])
    lm = [t["shape"] for n, t in inventory["tensors"].items() if short_name(n) is not None]   # no vision, no mtp
    real_per, real_mlps, real_total = mlp_share(real, lm)
    real_share = real_mlps / real_total
    say("  Qwen3.5-0.8B (its inventory): per layer {p}; {n} layers: {m}; language model: {t}; MLPs: {s:.1%}",
        "  Qwen3.5-0.8B（其张量清单）：每层 {p}；{n} 层：{m}；语言模型：{t}；MLP 占 {s:.1%}",
        p=count(real_per), n=real.num_hidden_layers, m=count(real_mlps), t=count(real_total), s=real_share)


def width_line(hidden, inter, prefix_en, prefix_zh):
    """One line: the SwiGLU's parameters against a plain 4x MLP's, from the two widths."""
    prefix, r = tr(prefix_en, prefix_zh), inter / hidden
    matrices, against_plain = 3 * r, 3 * r / 8
    say("  {p}intermediate / hidden = {r:.2f}: 3 matrices x {r:.2f} = {m:.1f} x hidden^2 per layer, against 2 x 4 = 8 "
        "for a plain 4x MLP ({x:.2f}x its parameters; 8/3 = 2.67 wide would match it)",
        "  {p}intermediate / hidden = {r:.2f}：每层 3 个矩阵 x {r:.2f} = {m:.1f} x hidden^2，普通 4 倍宽的 MLP 是 "
        "2 x 4 = 8（是它的 {x:.2f} 倍；宽 8/3 = 2.67 倍时才相等）",
        p=prefix, r=r, m=matrices, x=against_plain)


width_line(H, I, "", "")
if ch.tiny and inventory:
    width_line(real.hidden_size, real.intermediate_size, "Qwen3.5-0.8B: ", "Qwen3.5-0.8B：")


# %% [markdown]
# ## 4. What the gate does on the sentence's tokens / 门在句子的词元上做了什么
# For each token of the sentence: the share of hidden units the gate nearly switches off
# (|silu(gate)| < 0.1), and the units with the largest output |silu(gate) * up| on average.
#
# 对句子里的每个词元：门几乎关掉的隐藏单元所占比例（|silu(gate)| < 0.1），以及平均输出
# |silu(gate) * up| 最大的几个单元。

# %%
section(4, "What the gate does on the sentence's tokens", "门在句子的词元上做了什么")
sg = F.silu(g.float())
off = (sg.abs() < 0.1).float().mean(-1)                                          # (T,)
tokens, off_shares = " ".join(repr(n) for n in names), " ".join(f"{v:.0%}" for v in off.tolist())
negative = (g < 0).float().mean().item()
say("  tokens: {t}", "  词元：{t}", t=tokens)
say("  share of units with |silu(gate)| < 0.1, per token: {s}", "  每个词元 |silu(gate)| < 0.1 的单元比例：{s}", s=off_shares)
say("  gate < 0 (silu between -0.278 and 0) for {n:.0%} of all unit-token pairs",
    "  在所有（单元，词元）对中，gate < 0（silu 在 -0.278 和 0 之间）的占 {n:.0%}", n=negative)
energy = h.float().pow(2).mean(0)                                                # (I,): mean square per unit
top = energy.topk(3)
units = tr(", ", "、").join(f"#{i} {v:.3g}" for i, v in zip(top.indices.tolist(), top.values.tolist()))
top_share = top.values.sum().item() / energy.sum().item()
say("  largest units (mean |h|^2 over the tokens): {u}; together {s:.1%} of the total over {i} units",
    "  最大的单元（各词元 |h|^2 的均值）：{u}；三个合计占 {i} 个单元总量的 {s:.1%}", u=units, s=top_share, i=I)
if ch.tiny:
    say("  (tiny checkpoint: made-up weights, so these shares describe random matrices, not Qwen3.5; run Qwen3.5-0.8B to see its units)",
        "  （小检查点：权重是编造的，这些比例描述的是随机矩阵而不是 Qwen3.5；用 Qwen3.5-0.8B 运行才能看到它的单元）")


# %% [markdown]
# ## 5. bf16 against fp32 on this CPU / 在这台 CPU 上比较 bf16 和 fp32
# The weights are stored in bf16. This chapter's layer is loaded as stored, so its matmuls run in
# bf16 (half the bytes to read); chapter 8's `load_model` converts every weight to fp32 by default
# (printed below), so the whole model's matmuls run in fp32. Which is faster depends on the CPU:
# many have fast fp32 kernels and slow bf16 ones. One matmul
# of 64 tokens at the 0.8B shape (1024 -> 3584), best of 5 (random values; the time does not
# depend on them). `bench/` measures the whole chapters.
#
# 权重以 bf16 存储。本章的这一层按存储的样子加载，所以它的矩阵乘法用 bf16 做（读的字节减半）；
# 第 8 章的 `load_model` 默认把所有权重转成 fp32（下面打印），所以整个模型的矩阵乘法用 fp32 做。
# 哪种更快取决于 CPU：很多 CPU 的
# fp32 内核很快而 bf16 内核很慢。以 0.8B 的形状（1024 -> 3584）对 64 个词元做一次矩阵乘法，
# 取 5 次中最快的（随机数值；耗时与数值无关）。整章的测量在 `bench/` 里。

# %%
section(5, "bf16 against fp32 on this CPU", "在这台 CPU 上比较 bf16 和 fp32")


def best_of(f, n=5):
    """The fastest of n timed calls of f, in seconds (after one call to warm up)."""
    f()
    times = []
    for _ in range(n):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return min(times)


a32, w32 = torch.randn(64, 1024), torch.randn(3584, 1024) * 0.02
a16, w16 = a32.bfloat16(), w32.bfloat16()
ch.threads = use(choose(small=False))  # a Qwen3.5-0.8B-size product, on any checkpoint: big enough to split
t32, t16 = best_of(lambda: a32 @ w32.T), best_of(lambda: a16 @ w16.T)
ms32, ms16, slower = t32 * 1e3, t16 * 1e3, t16 / t32
say("  (64 x 1024) @ (1024 x 3584): fp32 {a:.2f} ms, bf16 {b:.2f} ms: bf16 takes {r:.2f}x the fp32 time here",
    "  (64 x 1024) @ (1024 x 3584)：fp32 {a:.2f} 毫秒，bf16 {b:.2f} 毫秒：在这里 bf16 用时是 fp32 的 {r:.2f} 倍",
    a=ms32, b=ms16, r=slower)
note(ch.threads)
ref = (a32.double() @ w16.double().T)                                            # the bf16 weights, exactly
err16 = ((a16 @ w16.T).double() - (a16.double() @ w16.double().T)).abs().max().item()
ref_max = ref.abs().max().item()
say("  bf16 result vs the same bf16 inputs multiplied in float64: max error {e:.1e} (outputs up to {s:.2f})",
    "  bf16 结果与同样的 bf16 输入在 float64 中相乘相比：最大误差 {e:.1e}（输出最大 {s:.2f}）", e=err16, s=ref_max)
default = inspect.signature(load_model).parameters["dtype"].default
layer_dtype, model_dtype = str(mlp.gate_proj.weight.dtype).replace("torch.", ""), str(default).replace("torch.", "")
say("  this chapter's layer computes in {a} (as stored); chapter 8's load_model converts to {b} by default",
    "  本章的这一层用 {a} 计算（按存储的样子）；第 8 章的 load_model 默认转成 {b}", a=layer_dtype, b=model_dtype)


# %% [markdown]
# ## How to explain it / 怎么讲清楚
# The MLP works on each token alone. It projects the token up to 3584 hidden units twice; one copy,
# through silu, decides how much of the other passes; the result is projected back to 1024. The gate
# makes the unit's "on/off" depend on the token, at the price of a third matrix; the hidden layer is
# narrower than the usual 4x, which pays for part of it. The 24 MLPs hold 35% of Qwen3.5-0.8B's
# language-model parameters.
#
# MLP 单独处理每个词元：把词元投影到 3584 个隐藏单元两次，一份经过 silu 决定另一份能通过多少，
# 结果再投影回 1024。门让单元的开关取决于词元本身，代价是多一个矩阵；隐藏层比通常的 4 倍窄，抵消了其中一部分。
# 24 个 MLP 占 Qwen3.5-0.8B 语言模型参数的 35%。
#
# ## Summary / 小结
# - `MLP(hidden, intermediate)`: gate_proj, up_proj, down_proj, no bias; down(silu(gate(x)) * up(x)).
# - Matmuls in the weights' dtype (bf16 here, as stored; fp32 in `load_model`'s model), one cast back
#   to the input's dtype at the end.
# - Practice: `python practice/judge.py 208` (the SwiGLU MLP).
#
# - `MLP(hidden, intermediate)`：gate_proj、up_proj、down_proj，没有偏置；down(silu(gate(x)) * up(x))。
# - 矩阵乘法用权重的数据类型（这里按存储的样子是 bf16；`load_model` 的模型里是 fp32），最后转回输入的
#   数据类型一次。
# - 练习：`python practice/judge.py 208`（SwiGLU MLP）。

# %%
section(6, "Summary", "小结")
say("  SwiGLU: down(silu(gate(x)) * up(x)); {h} -> {i} -> {h}; 3 matrices, {p} parameters per layer.",
    "  SwiGLU：down(silu(gate(x)) * up(x))；{h} -> {i} -> {h}；3 个矩阵，每层 {p} 个参数。", h=H, i=I, p=count(per))
say("  Next: chapter 6, full attention. Practice: python practice/judge.py 208",
    "  下一章：第 6 章，全注意力。练习：python practice/judge.py 208")
