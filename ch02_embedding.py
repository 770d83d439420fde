# %% [markdown]
# # Chapter 2 · From text to vectors and back / 第 2 章 · 从文字到向量，再回到文字
#
# Text becomes pieces, pieces become byte-level symbols, BPE merges them into tokens, and each
# token id picks one row of the embedding table. At the other end of the model the same table
# turns a vector back into one score per token: logit = h . E.
#
# 文字先切成片段，片段变成字节级符号，BPE 把符号合并成词元，每个词元编号选出嵌入表的一行。
# 在模型的另一端，同一张表把向量变回每个词元一个分数：logit = h . E。
#
# Run: `python ch02_embedding.py [--text "..."] [--model PATH] [--tiny] [--lang zh]`

# %%
import torch

import qwen.embedding
import qwen.tokenizer
from engine.cli import chapter, count, pad, say, section, show_code, size
from qwen.embedding import Embedding, logits, row_norms
from qwen.lang import tr
from qwen.tokenizer import to_symbols
from qwen.weights import load

ch = chapter("Chapter 2: from text to vectors and back", "第 2 章：从文字到向量，再回到文字",
             options={"--text": dict(default="Hello! 毕老师！1 + 1 = 2", help=("the text to tokenize", "要切分的文字"))})


# %% [markdown]
# ## The code / 代码
# What this chapter is about, the tokenizer, the lookup and the tied scores: `qwen/tokenizer.py` and `qwen/embedding.py`, the whole file, read from the
# module itself (never a second copy): shown in a notebook, printed with `--code`, else where it is.
#
# 本章讲的东西：分词器、查表和共享输出层的打分：`qwen/tokenizer.py` 和 `qwen/embedding.py` 的完整文件，直接从模块读出（不是另一份拷贝）：
# notebook 里直接显示，`--code` 打印，否则只说它在哪里。

# %%
taught = show_code(ch, qwen.tokenizer, qwen.embedding)
cfg, W, tok = ch.cfg, ch.W, ch.tokenizer
ROWS = cfg.vocab_size                                        # rows of the embedding table
N_BPE = (min(tok.special.values()) if tok.special else tok.vocab_size) if tok else ROWS   # ids below: BPE tokens


def name(i):
    return repr(tok.readable(i)) if tok else f"#{i}"


# %% [markdown]
# ## 1. Text -> pieces -> byte-level symbols -> tokens / 文字 -> 片段 -> 字节级符号 -> 词元
# A split rule (a regular expression) cuts the text into pieces: words with their leading
# space, single digits, runs of punctuation. Each UTF-8 byte of a piece is written as one
# printable symbol (a space is `Ġ`, a newline `Ċ`); a character takes 1 to 4 bytes (a Chinese
# character in the Basic Multilingual Plane 3, one beyond it, such as 𠀀, 4). BPE then merges
# symbols, pair by pair, in the order it learned. A token can end inside a character; it is
# then shown as its bytes, like <e6 af>. Special tokens (`<|im_start|>` ...) are matched whole.
#
# 切分规则（一个正则表达式）先把文字切成片段：带前导空格的词、单个数字、连续的标点。片段的每个
# UTF-8 字节写成一个可打印的符号（空格是 `Ġ`，换行是 `Ċ`）；一个字符占 1 到 4 个字节（基本多文种
# 平面里的汉字占 3 个，平面之外的，比如 𠀀，占 4 个）。然后 BPE 按学到的顺序一对一对地合并符号。
# 一个词元也可能停在字符中间，这时显示成它的字节，比如 <e6 af>。特殊词元（`<|im_start|>` 等）整体匹配。

# %%
section(1, "From text to token ids", "从文字到词元编号")
text = ch.args.text
if tok is None:
    ids = list(range(min(8, ROWS)))
    first, last = ids[0], ids[-1]
    say("  (no tokenizer files in this folder: this section is skipped; the examples use ids {a}..{b})",
        "  （这个文件夹里没有分词器文件：跳过本节；后面的例子用编号 {a}..{b}）", a=first, b=last)
else:
    ids, pieces = tok.encode(text), tok.pieces(text)
    n_pieces, n_ids = len(pieces), len(ids)
    say("  text: {t!r} -> {n} pieces -> {k} tokens", "  文字：{t!r} -> {n} 个片段 -> {k} 个词元", t=text, n=n_pieces, k=n_ids)
    head = pad(tr("piece", "片段"), 16), pad(tr("byte-level symbols", "字节级符号"), 22), tr("tokens (id 'text')", "词元（编号 '文字'）")
    say("  {a} {b} {c}", "  {a} {b} {c}", a=head[0], b=head[1], c=head[2])
    for piece in pieces:
        symbols = piece if piece in tok.special else to_symbols(piece)
        tokens = tr(", ", "、").join(f"{i} {tok.readable(i)!r}" for i in tok.encode(piece))
        piece_col, symbols_col = pad(repr(piece), 16), pad(repr(symbols), 22)
        say("  {p} {s} {t}", "  {p} {s} {t}", p=piece_col, s=symbols_col, t=tokens)
    bmp, beyond = len("毕".encode()), len("𠀀".encode())
    say("  UTF-8 bytes: '毕' {a}, '𠀀' {b}", "  UTF-8 字节数：'毕' {a} 个，'𠀀' {b} 个", a=bmp, b=beyond)
    round_trip = tok.decode(ids) == text
    say("  decode(encode(text)) == text: {ok}", "  decode(encode(文字)) 还原出原文：{ok}", ok=round_trip)
    if any(i >= ROWS for i in ids):
        ids = [i for i in ids if i < ROWS]
        say("  (ids beyond the table's {r} rows are left out below)", "  （超出嵌入表 {r} 行的编号下面不用）", r=ROWS)


# %% [markdown]
# ## 2. The embedding table / 嵌入表
# Row i of a (vocab_size, hidden_size) table is the vector of token i: an embedding is a lookup.
# The table has more rows than the tokenizer has ids: the extra rows belong to no token; the
# table is rounded up to a multiple of 256 (a size matrix kernels handle well).
#
# (vocab_size, hidden_size) 表的第 i 行就是词元 i 的向量：嵌入就是查表。表的行数比分词器的编号多：
# 多出的行不属于任何词元；表的大小被凑成 256 的倍数（矩阵运算喜欢这样的尺寸）。

# %%
section(2, "The embedding table: one row per token id", "嵌入表：每个词元编号一行")
embed = load(Embedding(ROWS, cfg.hidden_size, W.dtype("embed_tokens.weight")), W, "embed_tokens.")   # no copy
E = embed.weight.detach()
info = W.info("embed_tokens.weight")
shape, on_disk, in_fp32 = list(E.shape), size(info.nbytes), size(4 * info.numel)
say("  shape {s}, {dt}: {b} on disk; in fp32 it would take {f}", "  形状 {s}，{dt}：磁盘上 {b}；换成 fp32 要 {f}",
    s=shape, dt=info.dtype, b=on_disk, f=in_fp32)
if tok:
    n_special = len(tok.special)
    say("  {bpe:,} BPE tokens + {sp} special tokens = {n:,} ids", "  {bpe:,} 个 BPE 词元 + {sp} 个特殊词元 = {n:,} 个编号",
        bpe=N_BPE, sp=n_special, n=tok.vocab_size)
    if ROWS > tok.vocab_size:
        last, unused, blocks = ROWS - 1, ROWS - tok.vocab_size, ROWS // 256
        say("  rows {a:,}..{z:,} ({k}) belong to no token; {r:,} = 256 x {m}",
            "  第 {a:,}..{z:,} 行（{k} 行）不属于任何词元；{r:,} = 256 x {m}",
            a=tok.vocab_size, z=last, k=unused, r=ROWS, m=blocks)
if ch.tiny:
    real_bytes = size(248320 * 1024 * 2)
    say("  (the tiny checkpoint ships Qwen3.5's own vocabulary: these ids and counts are Qwen3.5's)",
        "  （小检查点带的是 Qwen3.5 自己的词表：这些编号和数量就是 Qwen3.5 的）")
    say("  Qwen3.5-0.8B: shape [248320, 1024], BF16: {b} on disk", "  Qwen3.5-0.8B：形状 [248320, 1024]，BF16：磁盘上 {b}",
        b=real_bytes)
vectors = embed(torch.tensor(ids))                                   # (tokens,) -> (tokens, hidden)
n_ids, vectors_shape = len(ids), list(vectors.shape)
say("  embed({k} ids) -> shape {s}, {dt}", "  embed({k} 个编号) -> 形状 {s}，{dt}", k=n_ids, s=vectors_shape, dt=vectors.dtype)


# %% [markdown]
# ## 3. How long are the rows? / 每一行有多长？
# On trained weights the lengths come from training, and with tied embeddings not only from the
# input side: the output layer pushes down the logit of every token that is not the next one, so
# even a row no text ever uses (padding, most special tokens) gets a gradient at every step. So
# an unused row is not simply its starting point. The built-in tiny checkpoint's rows are
# random: its lengths mean nothing.
#
# 在训练过的权重上，行的长度来自训练，而且共享嵌入时不只来自输入一侧：输出层会压低每个不是下一个
# 词元的 logit，所以即使从没在文字里出现过的行（填充行、大部分特殊词元）每一步也会得到梯度。
# 所以没用过的行并不就是它的初始值。内置小检查点的行是随机的：它的长度没有含义。

# %%
section(3, "Row lengths |E[i]| (fp32, a slice at a time)", "每行的长度 |E[i]|（fp32，逐块计算）")
norms = row_norms(E)                                                 # (rows,)
lo, median, hi = torch.quantile(norms[:N_BPE][:1_000_000].float(), torch.tensor([0.01, 0.5, 0.99])).tolist()
say("  BPE rows: median {m:.3f}, 1% {lo:.3f}, 99% {hi:.3f}", "  BPE 词元的行：中位数 {m:.3f}，1% 分位 {lo:.3f}，99% 分位 {hi:.3f}",
    m=median, lo=lo, hi=hi)
for label, largest in ((tr("longest ", "最长"), True), (tr("shortest", "最短"), False)):
    top = torch.topk(norms[:N_BPE], min(5, N_BPE), largest=largest).indices.tolist()
    label, rows = pad(label, 8), tr("; ", "；").join(f"{name(i)} {norms[i]:.3f}" for i in top)
    say("  {l} {r}", "  {l} {r}", l=label, r=rows)
if tok and ROWS > tok.vocab_size:
    special_mean, padding_mean = norms[N_BPE:tok.vocab_size].mean().item(), norms[tok.vocab_size:].mean().item()
    say("  special rows: mean {s:.3f}; padding rows: mean {p:.3f}", "  特殊词元的行：平均 {s:.3f}；填充行：平均 {p:.3f}",
        s=special_mean, p=padding_mean)
if ch.tiny:
    say("  (tiny checkpoint: random rows, so no token is longer for a reason)", "  （小检查点：行是随机的，长短没有原因）")


# %% [markdown]
# ## 4. Neighbours / 近邻
# cosine(a, b) = a . b / (|a| |b|): the direction, without the length. On trained weights the
# nearest rows are tokens used in similar contexts; nothing told the model which words are
# alike. On the tiny checkpoint the neighbours are chance.
#
# cosine(a, b) = a . b / (|a| |b|)：只看方向，不看长度。在训练过的权重上，最近的行是在相似
# 上下文中出现的词元；没有人告诉模型哪些词相近。在小检查点上，近邻只是巧合。

# %%
section(4, "Nearest neighbours by cosine", "按余弦相似度找最近的词元")
if tok:
    words = [w for w in (" king", " Paris", " running", "猫", "北京", " 2024") if len(tok.encode(w)) == 1]
    qids = [i for i in (tok.encode(w)[0] for w in words) if i < N_BPE]
else:
    qids = ids[:4]
scores = logits(E[qids], E)[:, :N_BPE]                               # (queries, BPE rows): h . E[i], fp32
cos = scores / (norms[qids, None] * norms[None, :N_BPE]).clamp_min(1e-12)   # dot / both lengths
for i, row in zip(qids, cos):
    others = [j for j in row.topk(min(6, N_BPE)).indices.tolist() if j != i][:5]
    word, nearest = pad(name(i), 12), tr(", ", "，").join(f"{name(j)} {row[j]:.2f}" for j in others)
    say("  {w} -> {n}", "  {w} -> {n}", w=word, n=nearest)
if ch.tiny:
    say("  (tiny checkpoint: random rows; these neighbours mean nothing)", "  （小检查点：行是随机的，这些近邻没有含义）")


# %% [markdown]
# ## 5. Back to scores: logit = h . E / 变回分数：logit = h . E
# With tied embeddings the output layer is this same table, so the score of token i for a final
# vector h is h . E[i], and all scores at once are h @ E.T. A dot product rewards length as well
# as direction: feed a row back in, and a longer row can outscore the row itself.
#
# 共享嵌入时，输出层就是这张表，所以最后的向量 h 对词元 i 的分数是 h . E[i]，一次算出全部分数
# 就是 h @ E.T。点积既看方向也看长度：把某一行自己送进去，更长的行可能比它自己的分数还高。

# %%
section(5, "The same table scores every token: logits = h @ E.T", "同一张表给每个词元打分：logits = h @ E.T")
tied = str(cfg.tie_word_embeddings)                                  # the config's value
extra = "" if cfg.tie_word_embeddings else tr(" (this checkpoint has its own lm_head; we use E to show the idea)",
                                              "（这个检查点有自己的 lm_head；这里用 E 来说明道理）")
say("  tie_word_embeddings = {t}{extra}", "  tie_word_embeddings = {t}{extra}", t=tied, extra=extra)
for i, row in zip(qids[:4], scores):
    own, rank, top = row[i].item(), int((row > row[i]).sum()) + 1, name(int(row.argmax()))
    word = name(i)
    say("  h = E[{i}] ({w}): own logit {s:.3f} (= |E[i]|^2), rank #{r} of {n:,}; top {top}",
        "  h = E[{i}]（{w}）：自己的 logit {s:.3f}（= |E[i]|^2），排第 {r} 名（共 {n:,} 个）；第一名 {top}",
        i=i, w=word, s=own, r=rank, n=N_BPE, top=top)


# %% [markdown]
# ## 6. The size of h sets how sharp the prediction is / h 的大小决定预测有多确定
# Multiply h by s and every logit is multiplied by s: softmax(s z) is softmax with temperature
# 1/s. We keep one direction (a row, rescaled to RMS 1) and grow its size, from a nearly flat
# distribution (entropy close to ln(vocab)) to a peaked one, where the largest logits take almost
# all the probability. The entropy goes to 0 only when one logit stands clear of the rest; when the
# two largest are close, the top probability stalls near 1/2 until h is very large. Chapter 3
# shows which size the final norm picks.
#
# 把 h 乘以 s，每个 logit 都乘以 s：softmax(s z) 就是温度为 1/s 的 softmax。我们固定一个方向
# （某一行，缩放到均方根为 1），只改变大小：从几乎平坦的分布（熵接近 ln(词表大小)）到尖锐的分布，
# 最大的几个 logit 拿走几乎全部概率。只有一个 logit 明显高于其他时，熵才趋于 0；最大的两个很接近时，
# 最高概率会停在 1/2 附近，直到 h 非常大。第 3 章会看到最后的归一化选了多大。

# %%
section(6, "The size of h sets how sharp the prediction is", "h 的大小决定预测有多确定")
base = scores[0] / E[qids[0]].float().pow(2).mean().sqrt()           # logits of h = E[i] / RMS(E[i]): RMS(h) = 1
spread = base.std().item()                                           # how far apart the logits are at RMS 1
flat = torch.log(torch.tensor(float(N_BPE))).item()
say("  ln({n:,}) = {m:.2f} nats: the entropy of a flat distribution", "  ln({n:,}) = {m:.2f} 奈特：平坦分布的熵", n=N_BPE, m=flat)
for k in (0.1, 1, 3, 10, 30):                                        # sizes chosen so the logits' spread is k
    s = k / spread
    probs = torch.softmax(s * base, dim=-1)
    top_p, entropy = probs.max().item(), torch.special.entr(probs).sum().item()
    say("  RMS(h) = {s:<8.3g} top probability {p:<8.2g} entropy {e:.2f} nats",
        "  RMS(h) = {s:<8.3g} 最高概率 {p:<8.2g} 熵 {e:.2f} 奈特", s=s, p=top_p, e=entropy)
top2 = (s * base).topk(2).values                                      # at the largest size above
gap, second = (top2[0] - top2[1]).item(), torch.exp(top2[1] - top2[0]).item()
say("  at RMS(h) = {s:.3g} the two largest logits differ by {d:.2f}: the second gets {r:.0%} of the first's probability (e^-{d:.2f})",
    "  RMS(h) = {s:.3g} 时最大的两个 logit 相差 {d:.2f}：第二名的概率是第一名的 {r:.0%}（e^-{d:.2f}）", s=s, d=gap, r=second)
parameters = count(E.numel())
say("  parameters in the table: {n}", "  嵌入表的参数量：{n}", n=parameters)


# %% [markdown]
# ## How to explain it / 怎么讲给别人听
# Text is cut into pieces, written as bytes, and merged into tokens by BPE; a token id picks a
# row of the embedding table. With tied embeddings the same table scores every token at the
# end (logit = h . E[i]); the size of h sets how peaked the softmax is.
#
# 文字被切成片段、写成字节、由 BPE 合并成词元；词元编号选出嵌入表的一行。共享嵌入时，同一张表
# 在最后给每个词元打分（logit = h . E[i]）；h 的大小决定 softmax 有多尖。
#
# ## Summary / 小结
# - tokenizer: split rule, bytes -> symbols, BPE merges; special tokens matched whole.
# - embedding: a row lookup; tied output: logits = h @ E.T, computed a slice of rows at a time.
# - the length of h is a temperature: chapter 3's final norm sets it.
#
# - 分词器：切分规则、字节 -> 符号、BPE 合并；特殊词元整体匹配。
# - 嵌入：按行查表；共享的输出层：logits = h @ E.T，逐块计算。
# - h 的长度就是温度：由第 3 章最后的归一化决定。

# %%
say("\nExercises for this chapter: 203. Try one: python practice/judge.py 203",
    "\n本章练习：203。试一个：python practice/judge.py 203")
