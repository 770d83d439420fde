# %% [markdown]
# # Chapter 10 · The vision tower: an image becomes tokens / 第 10 章 · 视觉塔：图像变成词元
#
# Qwen3.5 is natively multimodal: 153 of its 488 tensors (`model.visual.*`, about 100 M
# parameters) are its eyes. They turn an image into a few hundred vectors of the language
# model's width, which chapter 11 puts into the prompt in place of `<|image_pad|>` tokens. This
# chapter sends one picture through the tower by hand, step by step, checks the steps against
# torch's own operations and the result against the library (`qwen/vision.py`): the image cut
# into patches of 16 x 16 pixels, the patch embedding (a Conv3d that is one matmul), the learned
# position table stretched to the image's grid, 2D rotary positions (row and column), 12 blocks
# of bidirectional attention and MLP, and the merger, which turns each 2 x 2 group of patches
# into one token. Then what it costs.
#
# Qwen3.5 天生是多模态的：它的 488 个张量中有 153 个（`model.visual.*`，约 1 亿个参数）是它的眼睛。
# 它们把一张图像变成几百个与语言模型同宽的向量，第 11 章把这些向量放进提示词，替换 `<|image_pad|>`
# 词元。本章手算一张图像穿过视觉塔的每一步，各步与 torch 自己的运算核对，结果与库（`qwen/vision.py`）
# 核对：图像切成 16 x 16 像素的图块，图块嵌入（一个等于一次矩阵乘法的 Conv3d），拉伸到图像网格上的
# 可学习位置表，2D RoPE（行和列），12 个双向注意力加 MLP 的块，以及把每 2 x 2 个图块合成一个词元的
# 合并器。最后看它的计算量。
#
# Run: `python ch10_vision.py [--image PATH] [--model PATH] [--tiny] [--lang zh] [--plot]`

# %%
import math
import time

import torch
import torch.nn.functional as F

import qwen.vision
from engine.cli import chapter, count, say, section, show_code
from engine.known import real_inventory
from engine.pictures import DEMO_WORD, demo_image
from engine.threads import note
from qwen.image import load_image, preprocess
from qwen.lang import QwenError, tr
from qwen.vision import VisionConfig, VisionModel
from qwen.weights import load

ch = chapter("Chapter 10: the vision tower", "第 10 章：视觉塔", plot=True, options={
    "--image": dict(metavar="PATH", default=None, help=(
        "the picture to look at (default: one the chapter draws: shapes, colours and a word)",
        "要看的图像（默认：本章自己画的一张：几个形状、几种颜色和一个单词）"))})


# %% [markdown]
# ## The code / 代码
# What this chapter is about, the vision tower: the patch embedding, the position table, 2D RoPE, the blocks and the
# merger: `qwen/vision.py`, the whole file, read from the module itself (never a second copy): shown in a notebook,
# printed with `--code`, else where it is. A checkpoint without a tower (a text-only export) stops the chapter here.
#
# 本章讲的东西：视觉塔：图块嵌入、位置表、2D RoPE、各个块和合并器：`qwen/vision.py` 的完整文件，直接从模块读出
# （不是另一份拷贝）：notebook 里直接显示，`--code` 打印，否则只说它在哪里。没有视觉塔的检查点（纯文本导出）
# 让本章在这里停下。

# %%
taught = show_code(ch, qwen.vision)
args, path, cfg, W = ch.args, ch.path, ch.cfg, ch.W
torch.set_grad_enabled(False)
V = cfg.raw.get("vision_config")                       # the tower's own config, nested in config.json
if not (V and any(n.startswith("model.visual.") for n in W.all_names)):
    say("  (this checkpoint has no vision tower (a text-only export): this chapter needs one; it stops here)",
        "  （这个检查点没有视觉塔（纯文本导出）：本章需要它，到此为止）")
    raise SystemExit(0)
inventory = real_inventory()                           # Qwen3.5-0.8B's published config, for the lines after tiny figures
REAL_V = inventory["config"]["vision_config"] if inventory else None


def w(name):
    """A tower tensor by its name under model.visual., in fp32 (the file stores bf16)."""
    return W["model.visual." + name].float()


def cell(r, c):
    """A grid cell (row, column), written as each language writes coordinates."""
    return tr("({r}, {c})", "（{r}，{c}）", r=int(r), c=int(c))


# %% [markdown]
# ## 1. The picture, cut into patches / 图像切成图块
# The image is resized so that each side is a multiple of 32 pixels (patch 16 x merge 2) within
# the checkpoint's pixel bounds (`preprocessor_config.json`), normalized with its mean and std, and
# repeated to 2 frames (the tower also reads video, 2 frames at a time). Then it is cut into
# patches of 3 colours x 2 frames x 16 x 16 pixels = 1536 numbers, in merge-block order: the 4
# patches of each 2 x 2 block come one after the other, so that the merger (section 6) finds them
# side by side. `qwen/image.py` does this; the grid (t, h, w) counts the patches.
#
# 图像先缩放，使每条边都是 32 像素（图块 16 x 合并 2）的倍数，并落在检查点的像素范围内
# （`preprocessor_config.json`），再用其中的均值和标准差归一化，并重复成 2 帧（视觉塔也读视频，每次 2 帧）。
# 然后切成 3 种颜色 x 2 帧 x 16 x 16 像素 = 1536 个数的图块，按合并块的顺序排列：每个 2 x 2 块的 4 个
# 图块一个接一个，让合并器（第 6 节）能把它们放在一起。`qwen/image.py` 做这件事；网格 (t, h, w) 数出图块的个数。

# %%
section(1, "The picture, cut into patches", "图像切成图块")
image = load_image(args.image) if args.image else demo_image()
if args.image:
    say("  {p}: {w} x {h} pixels", "  {p}：{w} x {h} 像素", p=args.image, w=image.width, h=image.height)
else:
    say("  the chapter's own picture: {w} x {h} pixels, a red square, a blue circle, a green triangle, the word {t!r}",
        "  本章自己画的图像：{w} x {h} 像素，一个红色正方形、一个蓝色圆形、一个绿色三角形和单词 {t!r}",
        w=image.width, h=image.height, t=DEMO_WORD)
start = time.perf_counter()
pixel_values, grid_thw = preprocess(image, path)                 # (patches, C*T*p*p), (1, 3)
prep_s = time.perf_counter() - start
P, M, TP = V["patch_size"], V["spatial_merge_size"], V["temporal_patch_size"]
C, D, NH = V.get("in_channels", 3), V["hidden_size"], V["num_heads"]
K = C * TP * P * P                                                 # numbers in one patch
if pixel_values.shape[1] != K:                       # the two files disagree on the patch
    raise QwenError("{f} cuts patches of {k} values, but config.json's vision tower takes {c} x {t} x {p} x {p} = {n}: "
                    "the two files come from different checkpoints. Download the folder again.",
                    "{f} 切出的图块有 {k} 个数，而 config.json 里的视觉塔要的是 {c} x {t} x {p} x {p} = {n} 个："
                    "这两个文件来自不同的检查点。请重新下载这个文件夹。",
                    f=path / "preprocessor_config.json", k=pixel_values.shape[1], c=C, t=TP, p=P, n=K)
t, h, w_ = grid_thw[0].tolist()
N = pixel_values.shape[0]                                          # patches
width, height, factor = w_ * P, h * P, P * M                       # pixels after resizing, their multiple
pixel_shape, prep_ms = list(pixel_values.shape), prep_s * 1000
say("  resized to {W} x {H} pixels (multiples of {f} = patch {p} x merge {m}): grid (t, h, w) = ({t}, {h}, {w})",
    "  缩放到 {W} x {H} 像素（{f} = 图块 {p} x 合并 {m} 的倍数）：网格（t，h，w）=（{t}，{h}，{w}）",
    W=width, H=height, f=factor, p=P, m=M, t=t, h=h, w=w_)
say("  pixel_values {s}: {n} patches of {c} colours x {tp} frames x {p} x {p} pixels = {k} numbers ({ms:.0f} ms)",
    "  pixel_values {s}：{n} 个图块，每个 {c} 种颜色 x {tp} 帧 x {p} x {p} 像素 = {k} 个数（{ms:.0f} 毫秒）",
    s=pixel_shape, n=N, c=C, tp=TP, p=P, k=K, ms=prep_ms)
rows = torch.arange(h).view(h // M, M, 1, 1).expand(-1, -1, w_ // M, M)      # each patch's grid cell,
cols = torch.arange(w_).view(1, 1, w_ // M, M).expand(h // M, M, -1, -1)     # in merge-block order
cell_r = rows.permute(0, 2, 1, 3).reshape(-1).repeat(t)                      # (N,)
cell_c = cols.permute(0, 2, 1, 3).reshape(-1).repeat(t)
two_blocks = 2 * M * M                                               # the patches of two merge blocks
first_cells = tr(" ", "").join(cell(r, c) for r, c in zip(cell_r[:two_blocks], cell_c[:two_blocks]))
say("  the first {k} patches are the grid cells {cells}: one 2 x 2 block, then the next block to its right",
    "  前 {k} 个图块是网格单元{cells}：一个 2 x 2 块，然后是它右边的下一个块", k=two_blocks, cells=first_cells)

# %% [markdown]
# ## 2. The patch embedding is one matmul / 图块嵌入就是一次矩阵乘法
# The file stores it as a Conv3d whose kernel (2 frames x 16 x 16) equals its stride: the
# kernel never overlaps itself and visits each patch exactly once. So it is a linear map of each
# patch's 1536 numbers: the kernel, flattened to a (hidden, 1536) matrix, times the patches.
#
# 文件里把它存成一个 Conv3d，卷积核（2 帧 x 16 x 16）等于步长：卷积核从不重叠，每个图块正好访问
# 一次。所以它就是对每个图块 1536 个数的线性映射：把卷积核展平成 (hidden, 1536) 的矩阵，乘以图块。

# %%
section(2, "The patch embedding is one matmul", "图块嵌入就是一次矩阵乘法")
kernel, bias = w("patch_embed.proj.weight"), w("patch_embed.proj.bias")     # (D, C, TP, P, P), (D,)
x = pixel_values.float() @ kernel.reshape(D, -1).T + bias                   # (N, D)
conv = F.conv3d(pixel_values.float().view(-1, C, TP, P, P), kernel, bias, stride=(TP, P, P)).view(-1, D)
kernel_shape, stride, matrix_shape = list(kernel.shape), [TP, P, P], [D, K]
say("  Conv3d weight {k}, stride {s} = its kernel -> as a matrix {m}",
    "  Conv3d 的权重 {k}，步长 {s} = 卷积核 -> 作为矩阵 {m}", k=kernel_shape, s=stride, m=matrix_shape)
conv_gap = (x - conv).abs().max().item()
embedded_shape = list(x.shape)
say("  patches {a} @ matrix^T + bias -> {b}; the Conv3d gives the same: max |difference| {d:.1e}",
    "  图块 {a} @ 矩阵^T + 偏置 -> {b}；Conv3d 给出同样的结果：最大差 {d:.1e}", a=pixel_shape, b=embedded_shape, d=conv_gap)

# %% [markdown]
# ## 3. The position table, stretched to the image / 位置表，拉伸到图像上
# The tower learned one vector per cell of a 48 x 48 grid (an image of 768 x 768 pixels). An image
# of another size gets the table resized to its own grid by bilinear interpolation, corners on
# corners (`align_corners=True`): each cell mixes the 4 nearest table entries. The result is added
# to the patch embeddings, in the same merge-block order. `--plot` draws one dimension of the table
# before and after.
#
# 视觉塔为 48 x 48 网格（768 x 768 像素的图像）的每个单元学到一个向量。别的尺寸的图像，把这张表用
# 双线性插值缩放到自己的网格上，角对角（`align_corners=True`）：每个单元混合最近的 4 个表项。结果按
# 同样的合并块顺序加到图块嵌入上。`--plot` 画出表的一个维度在插值前后的样子。

# %%
section(3, "The position table, stretched to the image", "位置表，拉伸到图像上")
table = w("pos_embed.weight")                                               # (side * side, D)
side = math.isqrt(table.shape[0])
grid_table = table.view(side, side, D)
stretched = F.interpolate(grid_table.permute(2, 0, 1)[None], size=(h, w_), mode="bilinear",
                          align_corners=True)[0].permute(1, 2, 0)           # (h, w, D)
table_shape = list(table.shape)
say("  pos_embed {s} = a {n} x {n} grid of {d}-vectors -> interpolated to the image's {h} x {w} grid",
    "  pos_embed {s} = {n} x {n} 网格，每格一个 {d} 维向量 -> 插值到图像的 {h} x {w} 网格",
    s=table_shape, n=side, d=D, h=h, w=w_)
r, c = h // 2, w_ // 3                                                      # one cell, by hand
y, z = r * (side - 1) / max(h - 1, 1), c * (side - 1) / max(w_ - 1, 1)      # where it falls in the table
y0, z0 = min(int(y), side - 2), min(int(z), side - 2)
dy, dz = y - y0, z - z0
taps = [(1 - dy) * (1 - dz), (1 - dy) * dz, dy * (1 - dz), dy * dz]        # the 4 neighbours' weights
mix = (taps[0] * grid_table[y0, z0] + taps[1] * grid_table[y0, z0 + 1]
       + taps[2] * grid_table[y0 + 1, z0] + taps[3] * grid_table[y0 + 1, z0 + 1])
interpolate_gap, where = (mix - stretched[r, c]).abs().max().item(), cell(r, c)
say("  cell {rc} falls at ({y:.2f}, {z:.2f}) in the table: weights {a:.2f} {b:.2f} {e:.2f} {f:.2f} "
    "on its 4 neighbours; by hand vs F.interpolate: max |difference| {d:.1e}",
    "  单元{rc}落在表中的（{y:.2f}，{z:.2f}）：4 个邻居的权重 {a:.2f} {b:.2f} {e:.2f} {f:.2f}；"
    "手算与 F.interpolate：最大差 {d:.1e}",
    rc=where, y=y, z=z, a=taps[0], b=taps[1], e=taps[2], f=taps[3], d=interpolate_gap)
corner_gap = max((stretched[0, 0] - grid_table[0, 0]).abs().max().item(),
                 (stretched[-1, -1] - grid_table[-1, -1]).abs().max().item())
first_cell, last_cell, last_entry = cell(0, 0), cell(h - 1, w_ - 1), cell(side - 1, side - 1)
say("  corners stay corners: cell {a} = table {a}, cell {b} = table {c}: max |difference| {d:.1e}",
    "  角还是角：单元{a} = 表{a}，单元{b} = 表{c}：最大差 {d:.1e}", a=first_cell, b=last_cell, c=last_entry, d=corner_gap)
x = x + stretched[cell_r, cell_c]                                           # (N, D), merge-block order

# %% [markdown]
# ## 4. 2D RoPE: row and column / 2D RoPE：行和列
# Inside the blocks, attention also gets RoPE (chapter 4), in two dimensions: half of each head's
# rotating pairs turn by the patch's row, the other half by its column (16 frequencies each at
# head_dim 64). Then a score between two patches depends only on how far apart they are, across
# and down.
#
# 在块内部，注意力也用 RoPE（第 4 章），而且是 2D RoPE：每个头旋转的数对中，一半按图块的行旋转，另一半
# 按列旋转（head_dim 64 时各 16 个频率）。于是两个图块之间的分数只取决于它们横向和纵向相距多远。

# %%
section(4, "2D RoPE: row and column", "2D RoPE：行和列")
HD = D // NH                                                                # head_dim
theta = (V.get("rope_parameters") or {}).get("rope_theta", 10000.0)
inv_freq = 1.0 / theta ** (torch.arange(0, HD // 2, 2, dtype=torch.float) / (HD // 2))   # (HD / 4,)

def rotary(rows, cols):
    """cos, sin (len, HD): the row's angles, the column's, then both again (rotate-half)."""
    angles = torch.cat([rows[:, None].float() * inv_freq, cols[:, None].float() * inv_freq], -1)
    angles = torch.cat([angles, angles], -1)
    return angles.cos(), angles.sin()

def turn(v, cos, sin):
    half = v.shape[-1] // 2
    return v * cos + torch.cat([-v[..., half:], v[..., :half]], -1) * sin

cos, sin = rotary(cell_r, cell_c)                                          # (N, HD)
n_freq = len(inv_freq)
say("  head_dim {d}: {f} frequenc{y} for the row, {f} for the column, each used twice (rotate-half); theta {t:g}",
    "  head_dim {d}：{f} 个频率给行，{f} 个给列，各用两次（rotate-half）；theta {t:g}",
    d=HD, f=n_freq, y="y" if n_freq == 1 else "ies", t=theta)
g = torch.Generator().manual_seed(0)
q, k = torch.randn(HD, generator=g), torch.randn(HD, generator=g)

def score(a, b):
    """q at grid cell a . k at grid cell b, both turned by their (row, column)."""
    (ca, sa), (cb, sb) = rotary(*torch.tensor([[a[0]], [a[1]]])), rotary(*torch.tensor([[b[0]], [b[1]]]))
    return (turn(q, ca[0], sa[0]) * turn(k, cb[0], sb[0])).sum().item()

pairs = [((2, 3), (0, 1)), ((12, 9), (10, 7)), ((7, 20), (5, 18))]          # each 2 down and 2 across, in the grid
scores = [score(a, b) for a, b in pairs]
other = score((2, 3), (0, 4))                                               # 2 down and 1 across
pair_cells = tr(", ", "、").join(cell(*a) + tr(" ", "与") + cell(*b) for a, b in pairs)
shown_scores, apart, from_cell, to_cell = " ".join(f"{v:+.4f}" for v in scores), cell(2, 2), cell(2, 3), cell(0, 4)
say("  random q, k at cells {p}: scores {s}: the same, only being {d} apart matters; {a} with {b}: {o:+.4f}",
    "  随机的 q、k 放在单元{p}：分数 {s}：相同，只有相距{d}起作用；{a}与{b}：{o:+.4f}",
    p=pair_cells, s=shown_scores, d=apart, a=from_cell, b=to_cell, o=other)

# %% [markdown]
# ## 5. The blocks: bidirectional attention across the image / 块：在整幅图像上的双向注意力
# Each block is Pre-Norm, like the language model's layers (chapter 8), with LayerNorm (with a
# bias) instead of RMSNorm: x + attention(norm1(x)), then x + MLP(norm2(x)). The attention has no
# causal mask: every patch reads every patch of its own image, before and after it (two images
# never read each other). q, k and v come from one matrix with a bias; the MLP is
# fc2(gelu_tanh(fc1(x))). `--plot` draws where one head of the first block looks from one patch.
#
# 每个块和语言模型的层一样是前置归一化（第 8 章），只是用带偏置的层归一化（LayerNorm）而不是 RMSNorm：
# x + attention(norm1(x))，然后 x + MLP(norm2(x))。注意力没有因果掩码：每个图块读自己这张图像的
# 所有图块，前后都读（两张图像互不读取）。q、k、v 来自同一个带偏置的矩阵；MLP 是
# fc2(gelu_tanh(fc1(x)))。`--plot` 画出第一个块的一个头从一个图块看向哪里。

# %%
section(5, "The blocks: bidirectional attention across the image", "块：在整幅图像上的双向注意力")
EPS = 1e-6
QUERIES = 1024                                                             # queries per step of the attention
depth = V["depth"]
per_image = (grid_thw[:, 0] * grid_thw[:, 1] * grid_thw[:, 2]).tolist()   # each image attends to itself only

def layer_norm(v, name):
    return F.layer_norm(v, (D,), w(name + ".weight"), w(name + ".bias"), EPS)

def attention(v, i, keep=None):
    """Block i's attention over each image on its own; keep=(head, patch): also return that row of weights."""
    qkv = (v @ w(f"blocks.{i}.attn.qkv.weight").T + w(f"blocks.{i}.attn.qkv.bias")).view(-1, 3, NH, HD)
    qh, kh, vh = qkv.unbind(1)                                                  # (N, NH, HD) each
    qh, kh = turn(qh, cos[:, None], sin[:, None]), turn(kh, cos[:, None], sin[:, None])
    out, row, at = torch.empty(qh.shape[0], NH, HD), None, 0
    for n in per_image:
        for head in range(NH):                                                  # one head, 1024 queries at a
            ks, vs = kh[at:at + n, head], vh[at:at + n, head]                   # time: (1024, n) weights at
            for q0 in range(0, n, QUERIES):                                     # most, whatever the image
                qs = qh[at + q0:at + min(q0 + QUERIES, n), head]                # (queries, HD)
                weights = torch.softmax(qs @ ks.T / math.sqrt(HD), dim=-1)      # (queries, n), no mask
                if keep and at == 0 and head == keep[0] and q0 <= keep[1] < q0 + QUERIES:
                    row = weights[keep[1] - q0]
                out[at + q0:at + q0 + len(qs), head] = weights @ vs
        at += n
    out = out.reshape(-1, D) @ w(f"blocks.{i}.attn.proj.weight").T + w(f"blocks.{i}.attn.proj.bias")
    return out, row

def mlp(v, i):
    up = v @ w(f"blocks.{i}.mlp.linear_fc1.weight").T + w(f"blocks.{i}.mlp.linear_fc1.bias")
    return F.gelu(up, approximate="tanh") @ w(f"blocks.{i}.mlp.linear_fc2.weight").T + w(f"blocks.{i}.mlp.linear_fc2.bias")

if args.image:                                                          # the patch at the picture's centre
    focus = (h // 2, w_ // 2)
else:                                                                   # the centre of the red square
    focus = (int(0.24 * h), int(0.24 * w_))
patch = int(((cell_r == focus[0]) & (cell_c == focus[1])).nonzero()[0])
after_blocks = []
for i in range(depth):
    a, row = attention(layer_norm(x, f"blocks.{i}.norm1"), i, keep=(0, patch) if i == 0 else None)
    if i == 0:
        look = row
    x = x + a
    x = x + mlp(layer_norm(x, f"blocks.{i}.norm2"), i)
    after_blocks.append(x)
plural, qkv_shape = "" if depth == 1 else "s", list(W.shape("model.visual.blocks.0.attn.qkv.weight"))
say("  {n} block{s}, each: LayerNorm, qkv {q} (with bias), {nh} heads x {hd}, no mask, proj; LayerNorm, MLP {d} -> {i} -> {d}",
    "  {n} 个块，每块：层归一化，qkv {q}（带偏置），{nh} 个头 x {hd}，无掩码，proj；层归一化，MLP {d} -> {i} -> {d}",
    n=depth, s=plural, q=qkv_shape, nh=NH, hd=HD, d=D, i=V["intermediate_size"])
top = int(look.argmax())
later, look_sum, focus_cell = look[patch + 1:].sum().item(), look.sum().item(), cell(*focus)
say("  block 0, head 0, from patch {p} at cell {f}: weights over the {n} patches sum to {s:.3f}; "
    "{l:.0%} of them on patches after it (no causal mask)",
    "  第 0 块第 0 头，从单元{f}的图块 {p} 看：{n} 个图块上的权重之和为 {s:.3f}；"
    "其中 {l:.0%} 落在它后面的图块上（没有因果掩码）",
    p=patch, f=focus_cell, n=per_image[0], s=look_sum, l=later)
largest, top_cell, even = look[top].item(), cell(cell_r[top], cell_c[top]), 1 / per_image[0]
say("  its largest weight: {v:.4f} on cell {rc} (an even spread would give {e:.4f} each)",
    "  最大的权重：{v:.4f}，在单元{rc}（平均分配时每个 {e:.4f}）", v=largest, rc=top_cell, e=even)
ch.unproven("where a head looks", "  (tiny checkpoint: made-up weights: where this head looks means nothing)",
            "  （小检查点：权重是编造的：这个头看向哪里没有意义）")
after_shape = list(x.shape)
say("  after the blocks: {s}, as before them (a block keeps the shape)", "  经过所有块之后：{s}，与之前相同（块不改变形状）",
    s=after_shape)

# %% [markdown]
# ## 6. The merger: 4 patches become 1 token / 合并器：4 个图块变成 1 个词元
# A token per patch would be many (784 for 448 x 448 pixels). The merger normalizes each patch
# (LayerNorm), lays the 4 patches of each 2 x 2 block side by side (4 x 768 = 3072 numbers: they
# are consecutive thanks to the merge-block order, so this is a plain reshape), and maps them with
# an MLP (3072 -> 3072, GELU, -> 1024) to the language model's width. The image becomes a quarter
# as many tokens, each a vector the language model reads like a word's embedding.
#
# 每个图块一个词元就太多了（448 x 448 像素是 784 个）。合并器先对每个图块做层归一化，再把每个 2 x 2 块的
# 4 个图块并排放在一起（4 x 768 = 3072 个数：因为按合并块顺序，它们本来就挨着，所以只是一次 reshape），
# 再用一个 MLP（3072 -> 3072，GELU，-> 1024）映射到语言模型的宽度。图像的词元数变成四分之一，每个都是
# 语言模型像读一个词的嵌入一样读的向量。

# %%
section(6, "The merger: 4 patches become 1 token", "合并器：4 个图块变成 1 个词元")
grouped = layer_norm(x, "merger.norm").view(-1, M * M * D)                  # (N / 4, 4 D)
hidden = F.gelu(grouped @ w("merger.linear_fc1.weight").T + w("merger.linear_fc1.bias"))
tokens = hidden @ w("merger.linear_fc2.weight").T + w("merger.linear_fc2.bias")   # (N / 4, text hidden)
group = M * M                                                                # patches per token
n_tokens, width_out, tokens_shape = tokens.shape[0], tokens.shape[1], list(tokens.shape)
say("  {n} patches x {d} -> {m} groups of {k} patches x {d} = {g} -> fc1, GELU {g} -> fc2 {o}",
    "  {n} 个图块 x {d} -> {m} 组，每组 {k} 个图块 x {d} = {g} -> fc1、GELU {g} -> fc2 {o}",
    n=N, d=D, m=N // group, k=group, g=group * D, o=tokens_shape)
token0_cells = tr(" ", "").join(cell(a, b) for a, b in zip(cell_r[:group], cell_c[:group]))
say("  token 0 is made of patches 0-{k1}, the cells {cells}; width {o} = the language model's hidden size {H}",
    "  第 0 个词元由图块 0-{k1} 组成，即单元{cells}；宽度 {o} = 语言模型的隐藏维度 {H}",
    k1=group - 1, cells=token0_cells, o=width_out, H=cfg.hidden_size)
say("  this image is {m} tokens in the prompt: {m} <|image_pad|> between <|vision_start|> and <|vision_end|> (chapter 11)",
    "  这张图像在提示词里是 {m} 个词元：<|vision_start|> 和 <|vision_end|> 之间的 {m} 个 <|image_pad|>（第 11 章）",
    m=n_tokens)

# %% [markdown]
# ## 7. By hand = the library / 手算 = 库
# `VisionModel` (`qwen/vision.py`) runs the same steps, with all images of a prompt in one call.
# `load_model` puts it in `model.visual`, which chapter 11 uses; here it is loaded alone (like a
# layer in chapters 3-7), so this chapter reads the tower's 100 M parameters, not the whole model.
#
# `VisionModel`（`qwen/vision.py`）执行同样的步骤，一次处理一个提示词里的所有图像。`load_model` 把它放在
# `model.visual` 里，第 11 章用的就是它；这里单独加载它（就像第 3-7 章单独加载一层），所以本章只读视觉塔的
# 1 亿个参数，而不是整个模型。

# %%
section(7, "By hand = the library", "手算 = 库")
with torch.device("meta"):                                                  # shapes only: the loader fills it
    visual = VisionModel(VisionConfig.from_config(cfg), out_hidden=cfg.hidden_size)
visual = load(visual, W, "model.visual.").float()                           # fp32, as load_model's model.visual
library = visual(pixel_values, grid_thw)                                    # (tokens, text hidden)
library_gap = (library - tokens).abs().max().item()
library_shape, library_max = list(library.shape), library.abs().max().item()
say("  VisionModel (model.visual) -> {s}; by hand vs the library: max |difference| {d:.1e} "
    "(values up to {m:.2f})",
    "  VisionModel（model.visual）-> {s}；手算与库：最大差 {d:.1e}（数值最大 {m:.2f}）",
    s=library_shape, d=library_gap, m=library_max)

# %% [markdown]
# ## 8. What it costs / 计算量
# Almost all the work is matrix products: 2 FLOPs (a multiply and an add) per weight per patch, and
# for attention 4 x hidden FLOPs per pair of patches, which grows with the square of the patches.
# The seconds are measured on your CPU (the better of 2 runs).
#
# 几乎所有的计算都是矩阵乘法：每个图块、每个权重 2 次浮点运算（一次乘、一次加）；注意力对每一对图块
# 是 4 x hidden 次，随图块数的平方增长。秒数是在你的 CPU 上测得的（2 次中较快的一次）。

# %%
def tower_flops(v, patches, per_image):
    """{part: FLOPs} of the tower for `patches` patches (2 per multiply-add)."""
    d, i, m = v["hidden_size"], v["intermediate_size"], v["spatial_merge_size"] ** 2
    k = v.get("in_channels", 3) * v["temporal_patch_size"] * v["patch_size"] ** 2
    pairs = sum(n * n for n in per_image)
    block = 2 * patches * d * 3 * d + 4 * pairs * d + 2 * patches * d * d + 2 * 2 * patches * d * i
    return {"patch embedding": 2 * patches * k * d, "blocks": v["depth"] * block,
            "merger": 2 * (patches // m) * (m * d) * (m * d + v["out_hidden_size"])}


section(8, "What it costs", "计算量")
flops = tower_flops(V, N, per_image)
best = float("inf")
for _ in range(2):                                                         # the better of 2 runs
    start = time.perf_counter()
    visual(pixel_values, grid_thw)
    best = min(best, time.perf_counter() - start)
total_flops = sum(flops.values())
shown_flops = {part: count(n) for part, n in flops.items()}
say("  {n} patches: patch embedding {a}, {L} block{s} {b}, merger {c}: {t} FLOPs",
    "  {n} 个图块：图块嵌入 {a}，{L} 个块 {b}，合并器 {c}：共 {t} 次浮点运算",
    n=N, a=shown_flops["patch embedding"], L=depth, s=plural, b=shown_flops["blocks"], c=shown_flops["merger"],
    t=count(total_flops))
gflops = total_flops / best / 1e9
say("  the tower took {s:.3f} s ({g:.2f} GFLOP/s); preprocessing {p:.3f} s",
    "  视觉塔用时 {s:.3f} 秒（每秒 {g:.2f} G 次浮点运算）；预处理 {p:.3f} 秒", s=best, g=gflops, p=prep_s)
note(ch.threads)
if REAL_V and (ch.tiny or REAL_V["hidden_size"] != D):
    real_n = (448 // REAL_V["patch_size"]) ** 2
    real = tower_flops(REAL_V, real_n, [real_n])
    real_total = sum(real.values())
    real_flops, in_blocks = count(real_total), real["blocks"] / real_total
    say("  Qwen3.5-0.8B (config), 448 x 448 pixels = {n} patches: {t} FLOPs, {b:.0%} of them in the blocks",
        "  Qwen3.5-0.8B（配置），448 x 448 像素 = {n} 个图块：共 {t} 次浮点运算，其中 {b:.0%} 在各块里",
        n=real_n, t=real_flops, b=in_blocks)

# %% [markdown]
# ## Plots / 图

# %%
plt = ch.pyplot() if args.plot else None
if plt is not None:
    shown = (pixel_values.view(N, C, TP, P, P)[:, :, 0].float())          # frame 0 of each patch
    raster = torch.zeros(C, h * P, w_ * P)
    for n in range(per_image[0]):
        rr, cc = int(cell_r[n]), int(cell_c[n])
        raster[:, rr * P:(rr + 1) * P, cc * P:(cc + 1) * P] = shown[n]
    picture = ((raster - raster.amin()) / (raster.amax() - raster.amin() + 1e-9)).permute(1, 2, 0).numpy()
    from matplotlib.ticker import MaxNLocator
    in_patches = (0, w_, h, 0)                                            # the picture's axes count patches
    column, row = ch.label("patch column", "图块列"), ch.label("patch row", "图块行")
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    axes[0].imshow(picture, extent=in_patches)
    axes[0].set_title(ch.label("the picture, {h} x {w} patches", "图像，{h} x {w} 个图块", h=h, w=w_), fontsize=9)
    image = axes[1].imshow(grid_table[:, :, 0].numpy(), cmap="coolwarm")
    fig.colorbar(image, ax=axes[1], fraction=0.046, pad=0.04)
    axes[1].set_title(ch.label("position table, dimension 0 ({n} x {n})", "位置表，第 0 维（{n} x {n}）", n=side),
                      fontsize=9)
    axes[1].set_xlabel(ch.label("table column", "表的列"))
    axes[1].set_ylabel(ch.label("table row", "表的行"))
    for axis in (axes[1].xaxis, axes[1].yaxis):
        axis.set_major_locator(MaxNLocator(integer=True))                # whole rows and columns
    image = axes[2].imshow(stretched[:, :, 0].numpy(), cmap="coolwarm", extent=in_patches)
    fig.colorbar(image, ax=axes[2], fraction=0.046, pad=0.04)
    axes[2].set_title(ch.label("interpolated to the image ({h} x {w})", "插值到图像上（{h} x {w}）", h=h, w=w_),
                      fontsize=9)
    for ax in (axes[0], axes[2]):
        ax.set_xlabel(column)
        ax.set_ylabel(row)
    title = ch.label("The learned position table before and after interpolation", "可学习的位置表：插值前后")
    if ch.tiny:
        title += "\n" + ch.label("tiny checkpoint: made-up numbers", "小检查点：数值是编造的")
    fig.suptitle(title, fontsize=10)
    ch.save(fig, "ch10_positions.png")

    heat = torch.zeros(h, w_)
    heat[cell_r[:per_image[0]], cell_c[:per_image[0]]] = look
    fig, axes = plt.subplots(1, 2, figsize=(9, 4))
    axes[0].imshow(picture, extent=in_patches)
    axes[0].scatter([focus[1] + 0.5], [focus[0] + 0.5], marker="x", color="black", s=60)
    axes[0].set_title(ch.label("the patch that looks (x)", "发出查询的图块（x）"), fontsize=9)
    image = axes[1].imshow(heat.numpy(), cmap="viridis", extent=in_patches)
    fig.colorbar(image, ax=axes[1], fraction=0.046, pad=0.04, label=ch.label("attention weight", "注意力权重"))
    axes[1].set_title(ch.label("block 0, head 0: its attention weights", "第 0 块第 0 头：它的注意力权重"), fontsize=9)
    for ax in axes:
        ax.set_xlabel(column)
        ax.set_ylabel(row)
    title = ch.label("Where one patch looks, across the whole image", "一个图块在整幅图像上看向哪里") + ch.figure_note()
    fig.suptitle(title, fontsize=10)
    ch.save(fig, "ch10_attention.png")

# %% [markdown]
# ## How to explain it / 怎么讲清楚
# The tower reads an image the way the language model reads text, once the image is cut into
# pieces: each 16 x 16 patch becomes a vector by one matmul, gets a position (a learned table
# stretched to the image, plus 2D RoPE of row and column in the attention), and 12 blocks of
# attention let every patch read every other. The merger then packs each 2 x 2 group of patches
# into one vector of the language model's width, so a 448 x 448 picture is 196 tokens.
#
# 把图像切成小块以后，视觉塔读图像的方式就像语言模型读文字：每个 16 x 16 的图块经一次矩阵乘法变成
# 一个向量，得到一个位置（一张拉伸到图像上的可学习表，再加上注意力里行和列的2D RoPE），12 个注意力块
# 让每个图块读其他所有图块。合并器再把每 2 x 2 个图块打包成一个与语言模型同宽的向量，所以一张
# 448 x 448 的图像是 196 个词元。
#
# ## Summary / 小结
# - `preprocess(image, path)` -> pixel_values (patches, 1536), grid_thw (images, 3); merge-block order.
# - Patch embedding = Conv3d with stride = kernel = one matmul; position table bilinear, corners aligned.
# - Blocks: LayerNorm, qkv with bias, 2D RoPE, attention without a mask within each image, gelu-tanh MLP.
# - Merger: LayerNorm, 4 neighbours side by side (4 x 768 = 3072), MLP to 1024: one token per 2 x 2 patches.
#
# - `preprocess(image, path)` -> pixel_values（图块数, 1536）、grid_thw（图像数, 3）；按合并块顺序。
# - 图块嵌入 = 步长等于卷积核的 Conv3d = 一次矩阵乘法；位置表双线性插值，角对齐。
# - 块：层归一化，带偏置的 qkv，2D RoPE，每张图像内部没有掩码的注意力，gelu-tanh MLP。
# - 合并器：层归一化，4 个邻居并排（4 x 768 = 3072），MLP 到 1024：每 2 x 2 个图块一个词元。

# %%
say("\nExercises for this chapter: 240, 241. Next: chapter 11, the image in the prompt",
    "\n本章练习：240、241。下一章：第 11 章，提示词里的图像")
