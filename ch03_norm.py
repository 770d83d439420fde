# %% [markdown]
# # Chapter 3 · Three normalizations / 第 3 章 · 三种归一化
#
# Every sublayer of Qwen3.5 reads its input through an RMSNorm. This chapter writes the three
# normalizations the model uses (`qwen/norm.py`: zero-centred RMSNorm, gated RMSNorm, l2norm),
# loads all of them from the real weights, and looks at what they do to the scale of a vector,
# why the weight is stored as w - 1, and how RMSNorm relates to LayerNorm.
#
# Qwen3.5 的每个子层都先让输入经过 RMSNorm。本章写出模型用到的三种归一化（`qwen/norm.py`：
# 零中心的 RMSNorm、带门的 RMSNorm、L2 归一化），从真实权重加载它们，观察它们如何改变向量的尺度、
# 为什么权重存成 w - 1，以及 RMSNorm 和 LayerNorm 的关系。
#
# Run: `python ch03_norm.py [--model PATH] [--tiny] [--lang zh] [--plot]`

# %%
import time
import warnings

import torch
import torch.nn.functional as F

from qwen.cli import chapter
from qwen.lang import get_lang, set_lang, tr
from qwen.model import model_norms
from qwen.norm import GatedRMSNorm, RMSNorm, l2norm
from qwen.weights import Config, load, load_weights

ch = chapter("Chapter 3: three normalizations", "第 3 章：三种归一化", plot=True)
args, path, cfg, W = ch.args, ch.path, ch.cfg, ch.W
H, DV = cfg.hidden_size, cfg.linear_value_head_dim

torch.manual_seed(0)                        # the course's inputs, drawn up front in a fixed order:
x = torch.randn(2, 3, H) * 5                # 2 x 3 vectors of RMS about 5
h = torch.randn(4, DV)                      # 4 head outputs for the gated norm
g = torch.Generator().manual_seed(1)        # everything else random draws from its own generator


def rms(t):
    """Root mean square of each vector along the last dimension, computed in fp32."""
    return t.float().pow(2).mean(-1).sqrt()


def first3(t):
    return "[" + ", ".join(f"{v:.2f}" for v in rms(t).flatten()[:3].tolist()) + "]"


def title(en, zh):
    print("\n" + tr(en, zh))
    print("-" * 78)


# %% [markdown]
# ## 1. What RMSNorm does / RMSNorm 做了什么
# y = x / rms(x) * (1 + w), with rms(x) = sqrt(mean(x^2) + eps).

# %%
title("1. RMSNorm rescales every vector to an RMS of 1", "1. RMSNorm 把每个向量缩放到均方根为 1")
plain = RMSNorm(H, cfg.rms_norm_eps)        # weight 0 means a scale of exactly 1
print(tr("  RMS of three input vectors:            {a}", "  三个输入向量的均方根：          {a}", a=first3(x)))
print(tr("  after RMSNorm with w = 0 (scale 1):     {b}", "  经过 w = 0（比例为 1）的 RMSNorm： {b}", b=first3(plain(x))))
print(tr("  The direction of each vector is kept; only its size changes:", "  每个向量的方向不变，只改变大小："))
print(tr("  cosine(x, RMSNorm(x)) = {c:.6f}", "  cosine(x, RMSNorm(x)) = {c:.6f}",
        c=F.cosine_similarity(x[0, 0], plain(x)[0, 0], dim=0).item()))

# %% [markdown]
# ## 2. By hand: [1, 2, 3, 4] / 手算一个例子：[1, 2, 3, 4]

# %%
title("2. The same thing by hand, on [1, 2, 3, 4]", "2. 用 [1, 2, 3, 4] 手算一遍")
v = torch.tensor([1.0, 2.0, 3.0, 4.0])
sq = v * v
ms = sq.mean()
r = ms.sqrt()
steps = [
    (tr("squares", "平方"), sq.tolist()),
    (tr("mean of the squares", "平方的均值"), round(ms.item(), 4)),
    (tr("root: the RMS", "开根号：均方根"), round(r.item(), 4)),
    (tr("divide by the RMS", "除以均方根"), [round(e, 4) for e in (v / r).tolist()]),
    (tr("mean square afterwards", "之后的平方均值"), round((v / r).pow(2).mean().item(), 4)),
]
for i, (what, value) in enumerate(steps, 1):
    print(f"  {i}. {what:<24} {value}")
print(tr("  RMSNorm(4) with w = 0 gives {y}: the same, up to eps = {eps:g} inside the root.",
        "  w = 0 的 RMSNorm(4) 给出 {y}：一样，只差根号里的 eps = {eps:g}。",
        y=[round(e, 4) for e in RMSNorm(4, cfg.rms_norm_eps)(v).tolist()], eps=cfg.rms_norm_eps))

# %% [markdown]
# ## 3. The real weights move the scale / 真实权重把尺度移到哪里

# %%
title("3. The learned scales of the real model", "3. 真实模型学到的缩放")
norm0 = load(RMSNorm(H, cfg.rms_norm_eps), W, "layers.0.input_layernorm.")
final = load(RMSNorm(H, cfg.rms_norm_eps), W, "norm.")
print(tr("  after layer 0's input norm: {a}    after the final norm: {b}",
        "  经过第 0 层的输入归一化：{a}    经过最后的归一化：{b}", a=first3(norm0(x)), b=first3(final(x))))
for key in ("layers.0.input_layernorm.weight", "norm.weight"):
    w = W[key].float()                      # stored bf16, statistics in fp32
    print(tr("  {key:<34} stored w: mean {m:+.3f}, range [{lo:+.2f}, {hi:+.2f}] -> scale 1 + w: mean {s:.3f}",
            "  {key:<34} 存储的 w：均值 {m:+.3f}，范围 [{lo:+.2f}, {hi:+.2f}] -> 缩放 1 + w：均值 {s:.3f}",
            key=key, m=w.mean().item(), lo=w.min().item(), hi=w.max().item(), s=(1 + w).mean().item()))
N_BPE = min(cfg.vocab_size, 248044)        # ids from 248044 on are special tokens and padding rows (chapter 2)
rows = torch.randint(0, N_BPE, (256,), generator=g)
E_rows = W.rows("embed_tokens.weight", rows).float()   # 256 real rows, read one by one (512 KB)
print(tr("  The final norm hands its output to logits = h . E (chapter 2), so it scales h up towards\n"
        "  the size of the embedding rows: RMS of 256 sampled rows of E = {e:.4f}, |row| = {n:.3f}.",
        "  最后的归一化把输出交给 logits = h . E（第 2 章），所以它把 h 放大到与嵌入表的行相称：\n"
        "  随机抽 256 行 E，均方根 = {e:.4f}，长度 = {n:.3f}。", e=rms(E_rows).mean().item(),
        n=E_rows.norm(dim=-1).mean().item()))

# %% [markdown]
# ## 4. Why the weight is stored as w - 1 / 为什么存 w - 1

# %%
title("4. bf16 is coarse near 1 and fine near 0: store w - 1", "4. bf16 在 1 附近粗、在 0 附近细：所以存 w - 1")
fi = torch.finfo(torch.bfloat16)
for value in (1.0, 0.25, 0.001):
    print(tr("  next to {v:<6g} the gap between bf16 numbers is {gap:.2e}", "  在 {v:<6g} 附近，相邻 bf16 数的间隔是 {gap:.2e}",
            v=value, gap=value * fi.eps))
print(tr("  1 + 0.001 stored in bf16 -> {a:.4f} (the update is lost); 0.001 stored in bf16 -> {b:.6f} (kept)",
        "  把 1 + 0.001 存成 bf16 -> {a:.4f}（更新被吞掉）；把 0.001 存成 bf16 -> {b:.6f}（保留下来）",
        a=torch.tensor(1.001).bfloat16().item(), b=torch.tensor(0.001).bfloat16().item()))
w = W["layers.0.input_layernorm.weight"].float()
as_scale = (1 + w).bfloat16().float() - 1           # what storing the scale itself would keep
changed = (as_scale != w).float().mean().item()
print(tr("  On the real layer-0 weights: storing 1 + w instead of w would change {c:.0%} of the values,\n"
        "  by up to {m:.1e}.", "  在真实的第 0 层权重上：如果存 1 + w 而不是 w，{c:.0%} 的数值会改变，\n"
        "  最大改变 {m:.1e}。", c=changed, m=(as_scale - w).abs().max().item()))

# %% [markdown]
# ## 5. bf16 in, bf16 out, statistics in fp32 / bf16 进、bf16 出，统计量用 fp32

# %%
title("5. bf16 in, bf16 out; the statistics in fp32", "5. bf16 输入、bf16 输出；统计量在 fp32 中计算")
xb = x.bfloat16()
yb = norm0(xb)
print(tr("  input {a} -> output {b}; the mean of squares and the root are computed in fp32,\n"
        "  and the result is rounded to bf16 once, at the end.", "  输入 {a} -> 输出 {b}；平方均值和开根号都在 fp32 中计算，\n"
        "  结果只在最后舍入一次到 bf16。", a=xb.dtype, b=yb.dtype))
naive = xb * torch.rsqrt(xb.pow(2).mean(-1, keepdim=True) + cfg.rms_norm_eps) * (1 + W["layers.0.input_layernorm.weight"])
xd = xb.double()                                     # float64 reference on the same bf16 inputs
ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + cfg.rms_norm_eps) * (1 + W["layers.0.input_layernorm.weight"].double())
err32, err16 = (yb.double() - ref).abs().max().item(), (naive.double() - ref).abs().max().item()
print(tr("  max error against float64: statistics in fp32 {a:.1e}; everything in bf16 {b:.1e} ({r:.0f}x worse)",
        "  与 float64 相比的最大误差：统计量用 fp32 {a:.1e}；全部用 bf16 {b:.1e}（差 {r:.0f} 倍）",
        a=err32, b=err16, r=err16 / max(err32, 1e-30)))

# %% [markdown]
# ## 6. The one-line form: F.rms_norm / 一行的写法：F.rms_norm

# %%
title("6. F.rms_norm: the same computation as one call", "6. F.rms_norm：一次调用完成同样的计算")
wq = W["layers.0.input_layernorm.weight"]
same32 = torch.equal(F.rms_norm(x, (H,), weight=1 + wq.float(), eps=cfg.rms_norm_eps), norm0(x))
with warnings.catch_warnings():             # bf16 input with an fp32 weight: torch warns it cannot fuse
    warnings.simplefilter("ignore")
    y_bf16_w = F.rms_norm(xb, (H,), weight=1 + wq, eps=cfg.rms_norm_eps)          # 1 + w rounded to bf16
    y_fp32_w = F.rms_norm(xb, (H,), weight=1 + wq.float(), eps=cfg.rms_norm_eps).bfloat16()
off = (y_bf16_w != yb).float().mean().item()
print(tr("  fp32: F.rms_norm(x, ({H},), weight=1 + w.float()) equals RMSNorm bit for bit: {s}",
        "  fp32：F.rms_norm(x, ({H},), weight=1 + w.float()) 与 RMSNorm 逐位相同：{s}", H=H, s=same32))
print(tr("  bf16 with weight = 1 + w (bf16): {o:.0%} of the outputs differ by one bf16 step, because\n"
        "  1 + w is rounded to bf16 before it is used; weight = 1 + w.float() matches exactly: {s}",
        "  bf16 且 weight = 1 + w（bf16）：{o:.0%} 的输出差一个 bf16 间隔，因为 1 + w 在使用前\n"
        "  先被舍入成 bf16；weight = 1 + w.float() 则完全一致：{s}", o=off, s=torch.equal(y_fp32_w, yb)))

# %% [markdown]
# ## 7. The gated RMSNorm / 带门的 RMSNorm

# %%
title("7. Gated RMSNorm: normalize, then let a gate decide how much passes",
      "7. 带门的 RMSNorm：先归一化，再由门决定放行多少")
gated = load(GatedRMSNorm(DV, cfg.rms_norm_eps), W, "layers.0.linear_attn.norm.")
print(tr("  weight: a plain scale (1 at init, not 1 + w), {dt}, mean {m:.3f}", "  权重：普通的缩放（初始为 1，不是 1 + w），{dt}，均值 {m:.3f}",
        dt=W.dtype("layers.0.linear_attn.norm.weight"), m=gated.weight.float().mean().item()))
for gate in (-6.0, 0.0, 6.0):
    out = gated(h, torch.full_like(h, gate))
    print(tr("  gate = {g:+.0f}: output RMS {r:.3f}   (silu({g:+.0f}) = {s:.3f})", "  门 = {g:+.0f}：输出的均方根 {r:.3f}（silu({g:+.0f}) = {s:.3f}）",
            g=gate, r=rms(out).mean().item(), s=F.silu(torch.tensor(gate)).item()))
print(tr("  A closed gate (very negative) silences a head; an open one passes it, amplified.\n"
        "  transformers rounds the normalized value to the input dtype before the weight; we round once\n"
        "  at the end. In fp32 the two agree bit for bit, in bf16 within 2 bf16 steps.",
        "  门关上（很负）时这个头几乎没有输出；门打开时输出通过并被放大。\n"
        "  transformers 在乘权重之前先把归一化结果舍入到输入的类型；我们只在最后舍入一次。\n"
        "  fp32 下两者逐位相同，bf16 下相差不超过 2 个 bf16 间隔。"))

# %% [markdown]
# ## 8. l2norm / L2 归一化

# %%
title("8. l2norm: unit length, with eps added to the sum", "8. L2 归一化：缩放到单位长度，eps 加在平方和上")
print(tr("  lengths after l2norm: {l}", "  L2 归一化之后的长度：{l}",
        l=[round(e, 3) for e in l2norm(x).norm(dim=-1).flatten()[:3].tolist()]))
tiny_vec = torch.full((128,), 1e-4)
inside = l2norm(tiny_vec).norm().item()
outside = (tiny_vec / (tiny_vec.norm() + 1e-6)).norm().item()
print(tr("  eps inside the root, added to the sum: a vector of length {n:.1e} comes out with length {a:.4f};\n"
        "  eps added to the length instead would give {b:.4f}. Near-zero vectors are shrunk, never blown\n"
        "  up, and the zero vector stays 0, not NaN: {z}",
        "  eps 加在根号里的平方和上：长度 {n:.1e} 的向量归一化后长度 {a:.4f}；\n"
        "  若把 eps 加在长度上则得到 {b:.4f}。接近 0 的向量只会被缩小、不会被放大，\n"
        "  零向量仍是 0，不是 NaN：{z}",
        n=tiny_vec.norm().item(), a=inside, b=outside, z=l2norm(torch.zeros(4)).tolist()))
print(tr("  Linear attention (chapter 7) applies it to q and k in fp32, then scales q by 1/sqrt({d}).",
        "  线性注意力（第 7 章）在 fp32 中对 q 和 k 使用它，然后把 q 乘以 1/sqrt({d})。", d=cfg.linear_key_head_dim))

# %% [markdown]
# ## 9. LayerNorm and RMSNorm / LayerNorm 与 RMSNorm
# LayerNorm subtracts the mean, then divides by the standard deviation; RMSNorm only divides by
# the RMS. Since RMS^2 = sigma^2 + mu^2, the two agree when the mean is near 0.

# %%
title("9. LayerNorm against RMSNorm: RMS^2 = sigma^2 + mu^2", "9. LayerNorm 与 RMSNorm：RMS^2 = sigma^2 + mu^2")
mu, var, ms2 = E_rows.mean(-1), E_rows.var(-1, unbiased=False), E_rows.pow(2).mean(-1)
print(tr("  on 256 real embedding rows: max |RMS^2 - (sigma^2 + mu^2)| = {d:.1e} (fp32 rounding); mean |mu| / RMS = {r:.3f}",
        "  在 256 行真实嵌入上：max |RMS^2 - (sigma^2 + mu^2)| = {d:.1e}（fp32 舍入）；平均 |mu| / RMS = {r:.3f}",
        d=(ms2 - (var + mu * mu)).abs().max().item(), r=(mu.abs() / ms2.sqrt()).mean().item()))
for shift in (0.0, 3.0 * rms(E_rows).mean().item()):
    rows_s = E_rows + shift
    ln = F.layer_norm(rows_s, (H,), eps=cfg.rms_norm_eps)
    rn = F.rms_norm(rows_s, (H,), eps=cfg.rms_norm_eps)
    print(tr("  rows + {s:.3f}: cosine(LayerNorm, RMSNorm) = {c:.4f}, max difference {d:.3f}",
            "  各行加上 {s:.3f}：cosine(LayerNorm, RMSNorm) = {c:.4f}，最大差 {d:.3f}",
            s=shift, c=F.cosine_similarity(ln, rn, dim=-1).mean().item(), d=(ln - rn).abs().max().item()))
print(tr("  With the mean near 0 the two are almost the same; shift every entry and RMSNorm keeps the\n"
        "  shift while LayerNorm removes it. RMSNorm needs one reduction (mean of squares), LayerNorm two.",
        "  均值接近 0 时两者几乎相同；把每个元素都平移后，RMSNorm 保留了平移，LayerNorm 把它去掉了。\n"
        "  RMSNorm 只需一次归约（平方均值），LayerNorm 需要两次。"))

# %% [markdown]
# ## 10. Pre-Norm and Post-Norm / 前置归一化与后置归一化

# %%
title("10. Pre-Norm (Qwen3.5) against Post-Norm, on a toy 24-layer stack",
      "10. 前置归一化（Qwen3.5 的做法）与后置归一化：一个 24 层的玩具网络")
D, L = 256, 24
blocks = [torch.randn(D, D, generator=g) / D ** 0.5 for _ in range(L)]   # stand-ins for sublayers
norm_d = RMSNorm(D)


def stack(x0, pre):
    xs, z = [], x0
    for Wl in blocks:
        z = z + norm_d(z) @ Wl if pre else norm_d(z + z @ Wl)   # Pre: x + f(norm(x)); Post: norm(x + f(x))
        xs.append(z)
    return xs


x0 = torch.randn(8, D, generator=g, requires_grad=True)
for pre, name in ((True, tr("Pre-Norm ", "前置归一化")), (False, tr("Post-Norm", "后置归一化"))):
    xs = stack(x0, pre)
    xs[-1].pow(2).mean().backward()
    print(tr("  {n}: stream RMS at layers 1/12/24 = {a:.2f} / {b:.2f} / {c:.2f}; gradient at the input {gr:.2e}",
            "  {n}：第 1/12/24 层残差流的均方根 = {a:.2f} / {b:.2f} / {c:.2f}；输入处的梯度 {gr:.2e}",
            n=name, a=rms(xs[0]).mean().item(), b=rms(xs[11]).mean().item(), c=rms(xs[-1]).mean().item(),
            gr=x0.grad.norm().item()))
    x0.grad = None
print(tr("  Pre-Norm leaves the residual stream itself untouched: it grows slowly and the gradient reaches\n"
        "  the input through the plain additions. Post-Norm renormalizes the stream after every layer,\n"
        "  so every gradient must pass through 24 norms. That is why deep models use Pre-Norm, and why\n"
        "  Qwen3.5 needs a final norm after the last layer.",
        "  前置归一化不改动残差流本身：它缓慢增长，梯度沿着加法直接回到输入。后置归一化每层之后都把\n"
        "  残差流重新归一化，梯度必须穿过 24 个归一化。所以深层模型都用前置归一化，\n"
        "  也因此 Qwen3.5 在最后一层之后还需要一个最终的归一化。"))

# %% [markdown]
# ## 11. Speed on this CPU / 在这台 CPU 上的速度

# %%
title("11. Speed on this CPU (fp32, shape (4, 512, {H}))".format(H=H), "11. 在这台 CPU 上的速度（fp32，形状 (4, 512, {H})）".format(H=H))
xs_ = torch.randn(4, 512, H, generator=g)
layer_norm = torch.nn.LayerNorm(H, eps=cfg.rms_norm_eps)
candidates = {"F.rms_norm": lambda t: F.rms_norm(t, (H,), weight=1 + norm0.weight.float(), eps=cfg.rms_norm_eps),
              "RMSNorm (qwen/norm.py)": norm0, "nn.LayerNorm": layer_norm}


def best_time(fn, reps=10):
    with torch.no_grad():
        fn(xs_)
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn(xs_)
            times.append(time.perf_counter() - t0)
    return min(times)


timings = {name: best_time(fn) for name, fn in candidates.items()}
base = timings["F.rms_norm"]
for name, secs in timings.items():
    print(tr("  {n:<24} {ms:7.2f} ms   {r:.2f}x F.rms_norm", "  {n:<24} {ms:7.2f} ms   是 F.rms_norm 的 {r:.2f} 倍",
            n=name, ms=secs * 1e3, r=secs / base))
if timings["nn.LayerNorm"] < timings["RMSNorm (qwen/norm.py)"]:
    print(tr("  One reduction fewer does not make RMSNorm faster by itself: here LayerNorm runs as one fused\n"
            "  kernel, while RMSNorm runs as several passes over memory. The savings reported for RMSNorm\n"
            "  come from fused kernels, as on GPUs.",
            "  少一次归约并不会自动让 RMSNorm 更快：这里 LayerNorm 是一个融合的内核，而 RMSNorm 要在内存上\n"
            "  走好几遍。RMSNorm 的加速来自融合的内核（比如 GPU 上的）。"))
print(tr("  (best of 10 runs; bench/bench_norm.py measures this properly)", "  （10 次中最快的一次；严格的测量见 bench/bench_norm.py）"))

# %% [markdown]
# ## 12. Every normalization of the model / 模型里所有的归一化

# %%
title("12. Every normalization in the model, built from the config", "12. 根据配置构建模型里所有的归一化")
norms = model_norms(cfg, W)                 # walks cfg.layer_types, loads each one strictly
residual = [k for k, m in norms.items() if isinstance(m, RMSNorm) and "self_attn" not in k]
qk = [k for k in norms if "self_attn" in k]
gated_all = [k for k, m in norms.items() if isinstance(m, GatedRMSNorm)]
print(tr("  {a} RMSNorms on the residual stream ({L} layers x 2 + the final one), {b} per-head q/k RMSNorms\n"
        "  ({f} full-attention layers x 2), {c} gated RMSNorms ({l} linear-attention layers): {n} in all,\n"
        "  each loaded strictly from its own weight.",
        "  残差流上 {a} 个 RMSNorm（{L} 层 x 2 + 最后一个），按头的 q/k RMSNorm {b} 个（{f} 个全注意力层 x 2），\n"
        "  带门的 RMSNorm {c} 个（{l} 个线性注意力层）：共 {n} 个，每个都严格地从自己的权重加载。",
        a=len(residual), L=cfg.num_hidden_layers, b=len(qk), f=len(cfg.full_attention_layers), c=len(gated_all),
        l=len(cfg.linear_attention_layers), n=len(norms)))

# %% [markdown]
# ## 13. The learned scales, layer by layer / 逐层看学到的缩放

# %%
title("13. The effective scale 1 + w, layer by layer", "13. 逐层的有效缩放 1 + w")
print(tr("  layer  input_layernorm: mean [min, max]      post_attention_layernorm: mean [min, max]",
        "  层     input_layernorm：均值 [最小, 最大]      post_attention_layernorm：均值 [最小, 最大]"))
scales = {}
for i in range(cfg.num_hidden_layers):
    cells = []
    for name in ("input_layernorm", "post_attention_layernorm"):
        s = 1 + norms[f"layers.{i}.{name}"].weight.detach().float()
        scales[(i, name)] = s
        cells.append(f"{s.mean():6.3f} [{s.min():+6.2f}, {s.max():+6.2f}]")
    print(f"  {i:>5}  {cells[0]:<37}  {cells[1]}")
s_final = 1 + norms["norm"].weight.detach().float()
print(tr("  final  {m:6.3f} [{lo:+6.2f}, {hi:+6.2f}]", "  最后   {m:6.3f} [{lo:+6.2f}, {hi:+6.2f}]",
        m=s_final.mean().item(), lo=s_final.min().item(), hi=s_final.max().item()))

if args.plot:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(tr("  --plot needs matplotlib: pip install -e .[plot] (the table above has the same numbers)",
                "  --plot 需要 matplotlib：pip install -e .[plot]（上面的表格是同样的数据）"))
    else:
        from pathlib import Path
        from matplotlib import font_manager
        cjk = [f.name for f in font_manager.fontManager.ttflist
               if any(k in f.name for k in ("CJK", "SimHei", "YaHei", "PingFang", "WenQuanYi", "Heiti"))]
        if cjk:
            plt.rcParams["font.sans-serif"] = cjk[:1] + plt.rcParams["font.sans-serif"]
        elif get_lang() == "zh":
            set_lang("en")                  # no Chinese font: English labels beat empty boxes
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        fig, axes = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
        for ax, name in zip(axes, ("input_layernorm", "post_attention_layernorm")):
            ax.boxplot([scales[(i, name)].numpy() for i in range(cfg.num_hidden_layers)],
                       positions=range(cfg.num_hidden_layers), showfliers=False)
            ax.axhline(1.0, color="gray", lw=0.8, ls="--")
            ax.set_ylabel(f"1 + w\n({name})", fontsize=9)
        axes[-1].set_xlabel(tr("layer", "层"))
        fig.suptitle(tr("Effective RMSNorm scale per layer", "每层 RMSNorm 的有效缩放")
                     + (tr(" (tiny checkpoint: made-up numbers)", "（小检查点：数值是编造的）") if "transformer_by_hand_tiny" in cfg.raw else ""))
        fig.tight_layout()
        fig.savefig(out / "ch03_layer_scales.png", dpi=110)
        fig2, ax2 = plt.subplots(figsize=(7, 3.5))
        ax2.hist(s_final.numpy(), bins=60)
        ax2.set_xlabel(tr("final norm: 1 + w", "最后的归一化：1 + w"))
        fig2.tight_layout()
        fig2.savefig(out / "ch03_final_norm.png", dpi=110)
        set_lang(args.lang)
        print(tr("  wrote {a} and {b}", "  已写出 {a} 和 {b}", a=out / "ch03_layer_scales.png", b=out / "ch03_final_norm.png"))
print("\n" + tr("Exercises for this chapter: 204, 205, 206. Try one: python practice/judge.py 204",
                "本章练习：204, 205, 206。试一个：python practice/judge.py 204"))
