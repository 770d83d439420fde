# %% [markdown]
# # Chapter 13 · Fewer bits: quantization by hand / 第 13 章 · 更少的位：手写量化
#
# Decoding one token reads every weight of the model once and does two flops with each (a
# multiply and an add): the CPU spends the step waiting for memory, and the memory bandwidth
# sets the speed. In fp32 that is 3 GB per token for Qwen3.5-0.8B. Store each weight in 8 bits, or 4, with a scale to bring it back, and
# there are fewer bytes to read: nearly 4x fewer with 8 bits; with 4 bits fewer still, but not 8x, since the
# scales, the output layer (kept at 8 bits) and the fp32 norms stay (section 4 measures both). This chapter quantizes by hand: int8 with a scale per
# output channel (a row of the weight), 4-bit with a scale per group of 128 weights; it measures
# the error on one weight and on the model's output, which layers it pays to quantize, and runs
# a quantized model (`qwen/quant.py`) with torch's weight-only kernels (`engine/quantized.py`).
#
# 解码一个词元要把模型的每个权重读一遍，每个权重只做两次浮点运算（一次乘、一次加）：CPU 的时间都花在
# 等内存上，速度由内存带宽决定。fp32 下，Qwen3.5-0.8B 每个词元要读 3 GB。把每个权重存成 8 位或
# 4 位，再配一个缩放因子把它还原，要读的字节就少了：8 位时接近 1/4；4 位时更少，但到不了 1/8，因为缩放因子、
# 输出层（保留 8 位）和 fp32 的归一化都还在（第 4 节测量两者）。本章手写量化：int8 每个输出通道（权重的一行）一个缩放因子，4 位每
# 128 个权重一组、每组一个缩放因子；测量它在一个权重上和在模型输出上的误差、哪些层值得量化，并用 torch
# 的只量化权重的内核（`engine/quantized.py`）运行量化后的模型（`qwen/quant.py`）。
#
# Run: `python ch13_quantize.py [--tokens N] [--tiny] [--lang zh]`

# %%
import os
import statistics
import time

import torch
import torch.nn.functional as F

import qwen.quant
from qwen import quant
from engine import quantized
from engine.cli import chapter, pad, say, section, show_code, size
from qwen.generate import generate_ids
from qwen.lang import QwenError, tr
from qwen.model import load_model
from engine.threads import note

ch = chapter("Chapter 13: quantization by hand", "第 13 章：手写量化", options={
    "--tokens": dict(type=int, default=None, help=(
        "greedy tokens compared against fp32 (default 32; 12 on the tiny checkpoint)",
        "与 fp32 比较的贪心词元数（默认 32；小检查点上 12）"))})


# %% [markdown]
# ## The code / 代码
# What this chapter is about, int8 per row and 4-bit in groups, the quantized layers, their kernels and the model
# quantized as it is read: `qwen/quant.py`, the whole file, read from the module itself (never a second copy): shown in
# a notebook, printed with `--code`, else where it is.
#
# 本章讲的东西：每行 int8 和分组的 4 位量化、量化后的层、它们的内核，以及边读边量化的模型：`qwen/quant.py` 的完整文件，
# 直接从模块读出（不是另一份拷贝）：notebook 里直接显示，`--code` 打印，否则只说它在哪里。

# %%
taught = show_code(ch, qwen.quant)
args, path, cfg = ch.args, ch.path, ch.cfg
torch.set_grad_enabled(False)
N = args.tokens if args.tokens is not None else (12 if ch.tiny else 32)
if N < 1:
    raise QwenError("--tokens must be at least 1.", "--tokens 至少为 1。")
model = load_model(path, vision=False)                          # fp32, text only
if ch.tiny:
    say("  The tiny checkpoint's weights are random: the error statistics and the bytes below hold, the quality\n"
        "  numbers (logits, greedy tokens) mean little: a random model has no text to keep.",
        "  小检查点的权重是随机的：下面的误差统计和字节数成立，质量数字（logit、贪心词元）意义不大：\n"
        "  随机模型本来就没有要保住的文本。")

# %% [markdown]
# ## 1. int8, one scale per row / int8，每行一个缩放因子
# Symmetric absmax: a row's largest |w| maps to 127, so scale = max|w| / 127, q = round(w /
# scale) in -127..127, and the model computes with q x scale. Rounding moves each weight by at most
# half a step, scale / 2. Why a scale per row, not one per tensor: one outlier in a row makes that
# row's steps coarse; with one scale for the whole tensor it makes every row's steps coarse.
#
# 对称的 absmax 量化：一行里最大的 |w| 映射到 127，所以 scale = max|w| / 127，q = round(w / scale) 落在
# -127..127，模型用 q x scale 计算。取整让每个权重最多移动半步，即 scale / 2。为什么每行一个缩放因子、而不是
# 整个张量一个：一行里的一个离群值只让这一行的步长变粗；整个张量共用一个缩放因子时，它让每一行都变粗。

# %%
section(1, "int8 per row on layers.0.mlp.gate_proj", "在 layers.0.mlp.gate_proj 上做每行 int8 量化")
w = model.layers[0].mlp.gate_proj.weight                         # (intermediate, hidden) fp32
q8, scale8 = quant.quantize_int8(w)                              # (out, in) int8, (out,) fp32
w8 = quant.dequantize_int8(q8, scale8)
e8 = quant.error(w, w8)
half_step_ok = quant.within_half_step(w, w8, scale8)              # up to fp32's own rounding
tensor_scale = w.abs().max() / 127                               # one scale for the whole tensor
e_tensor = quant.error(w, torch.round(w / tensor_scale).clamp(-127, 127) * tensor_scale)
w_shape, w_numel, scale_min, scale_max = list(w.shape), w.numel(), scale8.min().item(), scale8.max().item()
say("  weight {s}: {n:,} numbers; scales from {a:.2e} to {b:.2e} (one per row)",
    "  权重 {s}：{n:,} 个数；缩放因子从 {a:.2e} 到 {b:.2e}（每行一个）", s=w_shape, n=w_numel, a=scale_min, b=scale_max)
w_row = [round(v, 5) for v in w[0, :4].tolist()]                 # row 0, first 4: the weight, its codes, back
q_row, back_row = q8[0, :4].tolist(), [round(v, 5) for v in w8[0, :4].tolist()]
say("  row 0, first 4: w {w}  ->  q {q}  ->  q x scale {d}",
    "  第 0 行前 4 个：w {w}  ->  q {q}  ->  q x scale {d}", w=w_row, q=q_row, d=back_row)
say("  error: max {m:.2e}, RMS {r:.2e} ({rel:.2%} of the weights' RMS); within half a step everywhere "
    "(up to fp32's rounding): {ok}",
    "  误差：最大 {m:.2e}，均方根 {r:.2e}（权重均方根的 {rel:.2%}）；处处不超过半步（允许 fp32 自身的舍入）：{ok}",
    m=e8["max"], r=e8["rms"], rel=e8["rel"], ok=half_step_ok)
tensor_worse = e_tensor["rms"] / e8["rms"]
say("  one scale for the whole tensor instead: RMS error {r:.2e}, {x:.1f}x the per-row one",
    "  改成整个张量一个缩放因子：均方根误差 {r:.2e}，是每行缩放的 {x:.1f} 倍", r=e_tensor["rms"], x=tensor_worse)

# %% [markdown]
# ## 2. Round, clamp, and what goes wrong / 取整、钳位，以及常见的错
# q = clamp(round(w / scale), -127, 127). With whole-number bounds the order of round and clamp
# does not matter: a value above 127 rounds to 127 or more and is clamped to 127 either way, and
# one inside stays inside. What does matter: casting to int8 without rounding truncates towards
# zero (a whole step of error, not half), and a range of 0..255 with scale = max|w| / 255 (an
# unsigned, asymmetric range read as symmetric) throws every negative weight away.
#
# q = clamp(round(w / scale), -127, 127)。边界是整数时，先取整还是先钳位结果一样：大于 127 的值取整后
# 还是不小于 127，两种顺序都钳位成 127；范围内的值也留在范围内。真正有影响的是：不取整直接转成 int8 会向零
# 截断（误差是一整步而不是半步）；把 0..255 的范围和 scale = max|w| / 255（无符号的非对称范围）当成对称
# 的来用，会把所有负的权重都丢掉。

# %%
section(2, "Round and clamp in either order; truncation; an unsigned range", "取整与钳位的顺序；向零截断；无符号范围")
ratio = w / scale8[:, None] * 1.01                               # (out, in): a little past +-127 at each row's max
both = (torch.round(ratio).clamp(-127, 127) != torch.round(ratio.clamp(-127, 127))).sum().item()
truncated = (w / scale8[:, None]).to(torch.int8).float() * scale8[:, None]     # no round: towards zero
scale255 = w.abs().amax(1, keepdim=True) / 255
unsigned = torch.round(w / scale255).clamp(0, 255) * scale255
n_ratio = ratio.numel()
say("  round then clamp vs clamp then round, on {n:,} values (some past the bounds): {d} codes differ",
    "  先取整再钳位与先钳位再取整相比，{n:,} 个值（有些超出边界）：{d} 个编码不同", n=n_ratio, d=both)
truncated_worse = quant.error(w, truncated)["rms"] / e8["rms"]
say("  int8 cast without rounding: RMS error {x:.1f}x the rounded one", "  不取整直接转 int8：均方根误差是取整的 {x:.1f} 倍",
    x=truncated_worse)
unsigned_worse, negative = quant.error(w, unsigned)["rms"] / e8["rms"], (w < 0).float().mean().item()
say("  codes 0..255 with scale max|w| / 255, read as symmetric: RMS error {x:.0f}x ({neg:.0%} of the weights are "
    "negative and become 0)",
    "  用 0..255 的编码和 scale = max|w| / 255、当成对称的来用：均方根误差是 {x:.0f} 倍（{neg:.0%} 的权重是负的，都变成 0）",
    x=unsigned_worse, neg=negative)

# %% [markdown]
# ## 3. 4-bit in groups / 分组的 4 位量化
# 4 bits are 16 codes; we use -7..7 (symmetric, 0 exact). One scale for a row of 1024 weights
# with 15 levels is coarse, so each row is cut into groups with a scale each. The group size
# trades error for bytes: an fp32 scale per 128 weights adds 0.25 bits a weight, per 32 weights 1
# bit, a quarter of the 4 bits that going from 8 to 4 bits saved. We use 128 (gpt-fast's default;
# llama.cpp's q4_0 uses 32 with a 16-bit scale). A row too short for 128 (the tiny checkpoint's
# 16) uses the largest power of two that divides it.
#
# 4 位只有 16 个编码；我们用 -7..7（对称，0 是精确的）。1024 个权重的一行只用一个缩放因子、15 个等级，
# 太粗了，所以把每行切成若干组，每组一个缩放因子。组的大小在误差和字节之间取舍：每 128 个权重一个 fp32
# 缩放因子，每个权重多 0.25 位；每 32 个多 1 位，是从 8 位降到 4 位省下的 4 位的四分之一。我们用 128
# （gpt-fast 的默认值；llama.cpp 的 q4_0 用 32，缩放因子 16 位）。行短于 128 时（小检查点的 16），
# 用能整除它的最大的 2 的幂。

# %%
section(3, "4-bit: the group size against the error", "4 位：组的大小与误差")
width = w.shape[1]
for g in sorted({quant.group_size(width, group) for group in (width, 128, 32)}, reverse=True):   # a short row: fewer
    q4, scale4 = quant.quantize_int4(w, g)                       # (out, in) in -7..7, (out, in / g)
    e4 = quant.error(w, quant.dequantize_int4(q4, scale4))
    int4_worse, bits = e4["rms"] / e8["rms"], 4 + 32 / g          # an fp32 scale per g weights
    say("  groups of {g:>4}: RMS error {r:.2e} ({x:.1f}x int8's), max {m:.2e}; {b:.2f} bits a weight with the scales",
        "  每组 {g:>4} 个：均方根误差 {r:.2e}（int8 的 {x:.1f} 倍），最大 {m:.2e}；算上缩放因子每个权重 {b:.2f} 位",
        g=g, r=e4["rms"], x=int4_worse, m=e4["max"], b=bits)
packed = quant.pack_int4(q4)
codes_shape, packed_shape, unpacked_equal = list(q4.shape), list(packed.shape), torch.equal(quant.unpack_int4(packed), q4)
say("  two codes a byte: {a} codes -> {b} bytes; unpacked again equal: {ok}",
    "  一个字节放两个编码：{a} 个编码 -> {b} 个字节；解包后相同：{ok}", a=codes_shape, b=packed_shape, ok=unpacked_equal)

# %% [markdown]
# ## 4. Which layers, and the bytes / 量化哪些层，以及字节数
# Quantized: every projection of the 24 layers, and the tied embedding table, which is also the
# output layer: 248,320 x 1024, a third of the parameters and the largest matmul of a decode
# step. It is stored once, int8 per row: a token's row is looked up and dequantized, and the whole
# table gives the logits; in the 4-bit model it stays int8 (llama.cpp's q4_k_m also keeps its
# output layer at more bits: every logit passes through it). Kept in fp32: the norms, the conv,
# A_log and dt_bias, and in_proj_a / in_proj_b (16 rows each, feeding the decay's exponent and
# beta): together a fraction of a percent of the bytes. Each model is quantized as `main.py 9
# --quant` and `chat --quant` do it: each weight read from the file a block of rows at a time and
# quantized (`engine/quantized.py` load_quantized), the same numbers as quantizing the loaded fp32 model (bf16 to
# fp32 is exact; tests/test_quant.py), without a second full-precision model beside the fp32 one
# this chapter compares with. The two quantized models share one int8 table: the same codes.
#
# 被量化的：24 层里的每个投影，以及共享嵌入表，它同时是输出层：248,320 x 1024，占参数的三分之一，也是
# 解码一步里最大的矩阵乘法。它只存一份，每行 int8：一个词元的那一行查出来再反量化，整张表用来算 logit；
# 4 位模型里它仍是 int8（llama.cpp 的 q4_k_m 也让输出层保留更多位：每个 logit 都要经过它）。保留 fp32 的：
# 归一化、卷积、A_log 和 dt_bias，以及 in_proj_a / in_proj_b（各 16 行，决定衰减的指数和 beta）：
# 加起来不到字节数的百分之一。每个模型都像 `main.py 9 --quant` 和 `chat --quant` 那样量化：从文件里一次读一块行、
# 边读边量化（`engine/quantized.py` 的 load_quantized），与量化已加载的 fp32 模型得到相同的数（bf16 到 fp32 是精确的；
# tests/test_quant.py），而除了本章用来比较的那个 fp32 模型，内存里不会再有第二个全精度模型。两个量化模型共用
# 同一张 int8 表：编码完全相同。

# %%
section(4, "What is quantized, in bytes", "量化了什么，按字节数")
fp32_bytes = quantized.weight_bytes(model)
models = {"int8": quantized.load_quantized(path, "int8")}          # from the file: no second fp32 model
models["int4"] = quantized.load_quantized(path, "int4", share=models["int8"])   # the same int8 table, kept once
table = model.output_weight.numel()


def parts(m):
    """(projections, output layer / table, everything else) in bytes."""
    proj = sum(mod.nbytes for mod in m.layers.modules() if isinstance(mod, (quant.Int8Linear, quant.Int4Linear)))
    out = m.output_layer.nbytes
    return proj, out, quantized.weight_bytes(m) - proj - out


def row(*cells):
    """One line of the table: a label, then right-aligned columns (CJK characters are two columns wide)."""
    return "  " + pad(cells[0], 6) + "".join(pad(c, 14, right=True) for c in cells[1:])   # "output layer" is 12 wide


proj32 = sum(linear.weight.nbytes for *_, linear in quant.projections(model))
header = row("", tr("projections", "投影"), tr("output layer", "输出层"), tr("fp32 rest", "fp32 其余"), tr("total", "合计"))
print(header)
fp32_row = row("fp32", size(proj32), size(table * 4), size(fp32_bytes - proj32 - table * 4), size(fp32_bytes))
print(fp32_row)
for mode, m in models.items():
    p, o, rest = parts(m)
    fewer = tr("  ({r:.1f}x fewer bytes read per token)", "  （每个词元要读的字节是 fp32 的 1/{r:.1f}）", r=fp32_bytes / (p + o + rest))
    mode_row = row(mode, size(p), size(o), size(rest), size(p + o + rest)) + fewer
    print(mode_row)
table_int4, table_int8 = models["int4"].output_layer, models["int8"].output_layer
if isinstance(table_int4, quant.Int8Linear) and isinstance(table_int8, quant.Int8Linear):   # said only if so
    table8_bytes, table4_bytes = size(table_int8.nbytes), size(table_int4.nbytes)
    say("  the output layer (the tied table) is int8 in both models, {a} and {b}: only the projections go to 4 bits",
        "  两个模型的输出层（共享的嵌入表）都是 int8，{a} 和 {b}：只有投影变成 4 位", a=table8_bytes, b=table4_bytes)

# %% [markdown]
# ## 5. Two ways to compute, tested equal / 两种算法，结果相同
# The plain path dequantizes the weight and does an fp32 matmul: three lines, it saves memory but
# not time (the fp32 weight is rebuilt at every call). torch has CPU kernels that read the small
# codes directly: `torch._weight_int8pack_mm` (int8, a scale per row) and
# `torch.ops.aten._weight_int4pack_mm_for_cpu` (4-bit in groups of 32 to 256, on a packed layout of
# its own). They are fast only with bf16 inputs, on a CPU with native bf16 (AVX512-BF16, AMX) as on
# one without: x and the scales go in as bf16 and the result comes back in bf16, so the kernel agrees with the fp32 plain path to
# bf16's rounding (about 0.4% of a value), not bit for bit. Measured on one matrix of gate_proj's
# real size (3584 x 1024, random values: the time does not depend on the values), one token at a
# time as in decoding.
#
# 朴素的算法先把权重反量化、再做 fp32 矩阵乘法：只有三行，省内存但不省时间（每次调用都重建 fp32 权重）。
# torch 有直接读小编码的 CPU 内核：`torch._weight_int8pack_mm`（int8，每行一个缩放因子）和
# `torch.ops.aten._weight_int4pack_mm_for_cpu`（4 位，每组 32 到 256 个，用它自己的打包格式）。不论 CPU
# 有没有原生 bf16（AVX512-BF16、AMX），它们都只有输入是 bf16 时才快：x 和缩放因子以 bf16 传入，结果也是 bf16，所以内核与 fp32
# 的朴素算法只在 bf16 的舍入范围内一致（约为数值的 0.4%），而不是逐位相同。在一个
# gate_proj 真实大小（3584 x 1024，随机数值：时间与数值无关）的矩阵上测量，像解码一样每次一个词元。

# %%
section(5, "The plain path and torch's kernels on a 3584 x 1024 weight", "在 3584 x 1024 的权重上：朴素算法与 torch 的内核")
gen = torch.Generator().manual_seed(0)
big = torch.randn(3584, 1024, generator=gen) * 0.02              # (out, in)
x = torch.randn(1, 1024, generator=gen)                          # one token


def alternated(contenders, rounds, calls=1):
    """({name: median seconds of one call}, {name: [seconds of one call, each round]}): in each round
    every contender runs `calls` times in turn, after one warm-up call each. Alternated, so that they
    all see the same machine: other work that slows one round slows every contender in it, and the
    median drops that round (timed one after the other, a ratio here swung from 0.8x to 2x)."""
    for fn in contenders.values():
        fn()
    runs = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            runs[name].append((time.perf_counter() - start) / calls)
    return {name: statistics.median(t) for name, t in runs.items()}, runs


def timed_how(rounds):
    """One line under a timing: the rounds, and the machine's load while it ran."""
    load, cpus = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan"), os.cpu_count()
    say("  ({r} rounds, the contenders in turn within each, medians; the machine's load: {l:.1f} (1-minute "
        "average), {c} CPUs)", "  （{r} 轮，每轮内依次运行各方，取中位数；机器负载：{l:.1f}（1 分钟平均），{c} 个 CPU）",
        r=rounds, l=load, c=cpus)
    note(ch.threads)
    return load


with quantized.kernels():                                        # torch's kernels behind qwen/quant.py's seam
    layers = {"int8": (quant.Int8Linear.from_weight(big, kernel=False), quant.Int8Linear.from_weight(big)),
              "int4": (quant.Int4Linear.from_weight(big, kernel=False), quant.Int4Linear.from_weight(big))}
contenders = {"fp32": lambda: F.linear(x, big)}
for mode, (plain, fast) in layers.items():
    contenders[f"{mode} plain"] = lambda plain=plain: plain(x)
    contenders[f"{mode} kernel"] = lambda fast=fast: fast(x)
ROUNDS = 7
times, runs = alternated(contenders, ROUNDS, calls=5)            # {name: median seconds of one call}
t32 = times["fp32"]
t32_ms, big_bytes = t32 * 1e3, size(big.nbytes)
say("  fp32 F.linear: {t:.3f} ms, {b} read", "  fp32 F.linear：{t:.3f} 毫秒，读 {b}", t=t32_ms, b=big_bytes)
for mode, (plain, fast) in layers.items():
    y = plain(x)
    rel = ((fast(x) - y).abs().max() / y.abs().max()).item()
    tp, tk = times[f"{mode} plain"] * 1e3, times[f"{mode} kernel"] * 1e3        # ms
    kernel_speed, kernel_bytes = t32 / times[f"{mode} kernel"], size(fast.nbytes)
    say("  {m}: kernel against the plain path: max |difference| {d:.2%} of the largest output (bf16); "
        "plain {tp:.3f} ms, kernel {tk:.3f} ms ({r:.1f}x fp32's speed), {b} read",
        "  {m}：内核与朴素算法相比：最大 |差值| 是最大输出的 {d:.2%}（bf16）；朴素 {tp:.3f} 毫秒，"
        "内核 {tk:.3f} 毫秒（fp32 速度的 {r:.1f} 倍），读 {b}",
        m=mode, d=rel, tp=tp, tk=tk, r=kernel_speed, b=kernel_bytes)
load_kernels = timed_how(ROUNDS)

# %% [markdown]
# ## 6. The whole model: logits, greedy tokens, speed / 整个模型：logit、贪心词元、速度
# fp32 writes N greedy tokens; the quantized models read the same text (teacher forcing) and we
# count the positions where their greedy token differs from fp32's, and the largest logit
# difference. Each reads it as decoding does, the prompt at once and then one token a call, so
# each is measured on the path it decodes with (int8's kernel takes up to 32 rows at a time; a
# longer text read at once would go through the plain fp32 path instead). Then each decodes on its own, timed: the three in turn, in rounds, and the median of
# each (one after the other, the ratios swung with the machine's other work).
#
# fp32 先贪心地写出 N 个词元；量化后的模型读同一段文本（教师强制），数一数有多少个位置上它们的贪心词元
# 与 fp32 的不同，以及 logit 的最大差值。每个模型都像解码那样读：先一次读入提示词，再每次一个词元，所以每个模型
# 都在它解码时走的路径上测量（int8 的内核一次最多接受 32 行；一次读入更长的文本就会改走朴素的 fp32 算法）。然后各自独立解码并计时：三者在每一轮里依次运行，跑若干轮，各取中位数
# （一个接一个地测时，比值会随机器上的其他工作大幅摆动）。

# %%
section(6, "int8 and int4 against fp32 on this checkpoint", "在这个检查点上比较 int8、int4 与 fp32")
ids, _ = ch.sentence("Quantization stores each weight in fewer bits. 量化用更少的位存储每个权重。")
V = min(cfg.vocab_size, ch.tokenizer.vocab_size) if ch.tokenizer is not None else cfg.vocab_size


def decode(m):
    """(greedy ids, decode tokens/s) of N new tokens after the prompt."""
    stats = {}
    out = list(generate_ids(m, ids, max_new_tokens=N, stats=stats, vocab=V))
    return out, max(stats["new_tokens"] - 1, 1) / max(stats["decode_s"], 1e-9)


DECODE_ROUNDS = 3
contestants = {"fp32": model, **models}
speeds, replies = {name: [] for name in contestants}, {}
for _ in range(DECODE_ROUNDS):                                   # in turn within each round
    for name, m in contestants.items():
        replies[name], tokens_per_s = decode(m)                  # greedy: the same ids every round
        speeds[name].append(tokens_per_s)
speed = {name: statistics.median(s) for name, s in speeds.items()}   # {name: median decode tokens/s}
ref_ids, ref_speed = replies["fp32"], speed["fp32"]
show = not ch.tiny and ch.tokenizer is not None                  # trained weights: the text itself


def decoded_logits(m):
    """(N, vocab) logits at each position of fp32's reply, computed as decoding computes them: the
    prompt in one call with a cache (the prefill), then fp32's reply one token a call. So each
    model is measured on the path it decodes with: an int8 layer takes torch's kernel for up to
    KERNEL_ROWS rows and the plain fp32 path for more, and a whole text read at once (over 32 rows)
    would measure int8 on the plain path while its decoding used the kernel."""
    cache = m.new_cache()
    rows = [m(torch.tensor([ids]), cache=cache, last=True)[0, -1, :V]]
    for token in ref_ids[:-1]:                                   # teacher forcing: fp32's tokens, one a call
        rows.append(m(torch.tensor([[token]]), cache=cache, last=True)[0, -1, :V])
    return torch.stack(rows)


ref_logits = decoded_logits(model)                               # (N, vocab): at each reply position
measured = {}                                                    # {mode: (N, vocab) logits on its decoding path}
n_ref, top_logit = len(ref_ids), ref_logits.abs().max().item()
say("  fp32: {n} tokens, decode {s:.1f} tokens/s", "  fp32：{n} 个词元，解码 {s:.1f} 词元/秒", n=n_ref, s=ref_speed)
if show:
    ref_text = ch.tokenizer.decode(ref_ids)
    say("    fp32 writes: {t!r}", "    fp32 写出：{t!r}", t=ref_text)
for mode, m in models.items():
    logits = measured[mode] = decoded_logits(m)
    changed = int((logits.argmax(-1) != ref_logits.argmax(-1)).sum())
    logit_gap, relative_speed = (logits - ref_logits).abs().max().item(), speed[mode] / ref_speed
    say("  {m}: largest logit difference {d:.3f} (logits up to {top:.1f}); greedy token differs at {c} of {n}; "
        "decode {s:.1f} tokens/s ({r:.2f}x fp32)",
        "  {m}：logit 最大差值 {d:.3f}（logit 最大到 {top:.1f}）；{n} 个贪心词元中有 {c} 个不同；解码 {s:.1f} 词元/秒"
        "（fp32 的 {r:.2f} 倍）",
        m=mode, d=logit_gap, top=top_logit, c=changed, n=n_ref, s=speed[mode], r=relative_speed)
    if show:
        mode_text = ch.tokenizer.decode(replies[mode])
        say("    {m} writes: {t!r}", "    {m} 写出：{t!r}", m=mode, t=mode_text)
load_decode = timed_how(DECODE_ROUNDS)
ch.unproven("greedy tokens and logits kept by quantizing",
            "  (random weights and a 16-wide model: the differences and speeds are this toy's; the full-size\n"
            "  figures are measured by bench/bench_model.py)",
            "  （随机权重、宽度 16 的模型：这些差值和速度只属于这个玩具模型；完整大小的数字由\n"
            "  bench/bench_model.py 测量）")

# %% [markdown]
# ## How to explain it / 怎么讲给别人听
# A weight is a number the model multiplies by. Store it as a small whole number and a shared
# scale: 8 bits and one scale per row keep every weight within half a step of its value; 4 bits
# need a scale for every 128 weights. Decoding reads every weight once per token, so fewer bytes
# are a faster step, as long as the matmul reads the small codes directly instead of rebuilding
# the fp32 weight. The output layer is a third of the model: it is worth quantizing too, and
# the same table serves as the embedding.
#
# 权重是模型拿来相乘的一个数。把它存成一个小整数加一个共享的缩放因子：8 位、每行一个缩放因子，每个权重都
# 落在离原值半步以内；4 位则每 128 个权重需要一个缩放因子。解码时每个词元都把所有权重读一遍，所以字节越少
# 一步越快，前提是矩阵乘法直接读小编码，而不是重建 fp32 权重。输出层占模型的三分之一，也值得量化，同一张表
# 同时当嵌入表用。
#
# ## Summary / 小结
# - int8: scale = max|w| / 127 per row, q = clamp(round(w / scale), -127, 127), w' = q x scale;
#   error at most scale / 2. A per-tensor scale, truncation, an unsigned range: larger errors.
# - 4-bit: -7..7 per group of 128 along the input, a scale each; packed two codes a byte.
# - Quantized: the projections and the tied table (int8 in both models); fp32: norms, conv, decay.
# - Plain path = dequantize + matmul; the kernels read the codes and are tested equal to it.
#
# - int8：每行 scale = max|w| / 127，q = clamp(round(w / scale), -127, 127)，w' = q x scale；
#   误差不超过 scale / 2。整个张量一个缩放因子、向零截断、无符号范围：误差都更大。
# - 4 位：沿输入方向每 128 个一组，取值 -7..7，每组一个缩放因子；一个字节放两个编码。
# - 量化的：投影和共享嵌入表（两种模型里都是 int8）；fp32：归一化、卷积、衰减。
# - 朴素算法 = 反量化 + 矩阵乘法；内核直接读编码，并测试与它相等。

# %%
say("\nExercise for this chapter: 260 (per-row int8 quantization). Try it: python practice/judge.py 260\n"
    "A quantized model elsewhere: python main.py 9 --quant int8, python main.py chat --quant int4",
    "\n本章练习：260（每行 int8 量化）。试一试：python practice/judge.py 260\n"
    "在别处用量化模型：python main.py 9 --quant int8、python main.py chat --quant int4")
