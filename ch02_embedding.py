# %% [markdown]
# # Chapter 2 · From text to vectors and back / 第 2 章 · 从文字到向量，再回到文字
#
# Text becomes pieces, pieces become byte-level symbols, BPE merges them into tokens, each
# token id picks one row of the embedding table. At the other end of the model the same table
# turns a vector back into one score per token: logit = h . E.
#
# 文字先切成片段，片段变成字节级符号，BPE 把符号合并成词元，每个词元编号选出嵌入表的一行。
# 在模型的另一端，同一张表把向量变回每个词元一个分数：logit = h . E。
#
# Run: `python ch02_embedding.py [--text "..."] [--model PATH] [--tiny] [--lang zh]`

# %%
import torch

from qwen.cli import chapter, count, pad, size
from qwen.embedding import Embedding, logits, row_norms
from qwen.lang import tr
from qwen.tokenizer import Tokenizer, to_symbols
from qwen.weights import Config, load, load_weights

ch = chapter("Chapter 2: from text to vectors and back", "第 2 章：从文字到向量，再回到文字",
             options={"--text": dict(default="Hello! 毕老师！1 + 1 = 2", help=("the text to tokenize", "要切分的文字"))})
args, path, cfg, W = ch.args, ch.path, ch.cfg, ch.W
tok = Tokenizer.load(path)
N_BPE = min(tok.special.values()) if tok.special else tok.vocab_size     # ids below this are BPE tokens


def title(en, zh):
    print("\n" + tr(en, zh))
    print("-" * 78)


# %% [markdown]
# ## 1. Text -> pieces -> byte-level symbols -> tokens / 文字 -> 片段 -> 字节级符号 -> 词元

# %%
title("1. From text to token ids", "1. 从文字到词元编号")
print(tr("  text: {t!r}", "  文字：{t!r}", t=args.text))
ids = tok.encode(args.text)
print(tr("  {n} pieces after the split rule, {k} tokens after BPE:", "  按切分规则得到 {n} 个片段，BPE 之后是 {k} 个词元：",
        n=len(tok.pieces(args.text)), k=len(ids)))
print(tr("  {a:<16} {b:<22} {c}", "  {a:<16} {b:<22} {c}", a=tr("piece", "片段"), b=tr("byte-level symbols", "字节级符号"),
        c=tr("tokens (id 'text')", "词元（编号 '文字'）")))
for piece in tok.pieces(args.text):
    piece_ids = tok.encode(piece)
    symbols = piece if piece in tok.special else to_symbols(piece)
    print(f"  {pad(repr(piece), 16)} {pad(repr(symbols), 22)} " + ", ".join(f"{i} {tok.readable(i)!r}" for i in piece_ids))
print(tr("  Every UTF-8 byte is written as one printable symbol: a space is 'Ġ', a newline 'Ċ'; a Chinese\n"
        "  character is 3 bytes, so 3 symbols. A token can also end inside a character: it is then\n"
        "  shown as its bytes, like <e6 af>. Special tokens (<|im_start|> ...) are matched whole.",
        "  每个 UTF-8 字节写成一个可打印的符号：空格是 'Ġ'，换行是 'Ċ'；一个汉字占 3 个字节，所以是 3 个符号。\n"
        "  一个词元也可能停在字符中间：这时显示成它的字节，比如 <e6 af>。特殊词元（<|im_start|> 等）整体匹配。"))
back = tok.decode(ids)
print(tr("  decode(encode(text)) == text: {ok}", "  decode(encode(文字)) == 文字：{ok}", ok=back == args.text))

# %% [markdown]
# ## 2. The embedding table / 嵌入表

# %%
title("2. The embedding table: one row per token id", "2. 嵌入表：每个词元编号一行")
embed = load(Embedding(cfg.vocab_size, cfg.hidden_size), W, "embed_tokens.")   # no copy: rows load on use
E = embed.weight.detach()
info = W.info("embed_tokens.weight")
print(tr("  shape {s} ({v:,} rows x {d:,}), {dt}: {b} on disk; an fp32 copy would take {f}",
        "  形状 {s}（{v:,} 行 x {d:,}），{dt}：磁盘上 {b}；转成 fp32 要 {f}",
        s=list(E.shape), v=E.shape[0], d=E.shape[1], dt=info.dtype, b=size(info.nbytes), f=size(4 * info.numel)))
print(tr("  {bpe:,} BPE tokens + {sp} special tokens = {n:,} ids; rows {a:,}..{z:,} ({pad}) belong to no token:\n"
        "  padding that rounds the table up to a multiple of 256 for fast matrix kernels.",
        "  {bpe:,} 个 BPE 词元 + {sp} 个特殊词元 = {n:,} 个编号；第 {a:,}..{z:,} 行（{pad} 行）不属于任何词元：\n"
        "  它们是填充，把表凑成 256 的倍数，方便矩阵运算。", bpe=N_BPE, sp=len(tok.special), n=tok.vocab_size,
        a=tok.vocab_size, z=cfg.vocab_size - 1, pad=cfg.vocab_size - tok.vocab_size))
vectors = embed(torch.tensor(ids))                                   # (tokens,) -> (tokens, dim)
print(tr("  embed({k} ids) -> shape {s}, dtype {dt}: each id picked its row. First token's row[:5] = {r}",
        "  embed({k} 个编号) -> 形状 {s}，类型 {dt}：每个编号选出自己那一行。第一个词元的前 5 个数 = {r}",
        k=len(ids), s=list(vectors.shape), dt=vectors.dtype, r=[round(v, 4) for v in vectors[0, :5].float().tolist()]))

# %% [markdown]
# ## 3. How long are the rows? / 每一行有多长？

# %%
title("3. Row lengths |E[i]| (computed in fp32, a slice at a time)", "3. 每行的长度 |E[i]|（用 fp32 逐块计算）")
norms = row_norms(E)                                                 # (vocab,)
bpe_norms = norms[:N_BPE]
q = torch.quantile(bpe_norms, torch.tensor([0.01, 0.5, 0.99]))
print(tr("  BPE rows: median {m:.3f}, 1% {lo:.3f}, 99% {hi:.3f}", "  BPE 词元的行：中位数 {m:.3f}，1% 分位 {lo:.3f}，99% 分位 {hi:.3f}",
        m=q[1].item(), lo=q[0].item(), hi=q[2].item()))
for label, order in ((tr("longest", "最长"), True), (tr("shortest", "最短"), False)):
    top = torch.topk(bpe_norms, 5, largest=order).indices.tolist()
    print(f"  {label:<8} " + "; ".join(f"{tok.readable(i)!r} {bpe_norms[i]:.3f}" for i in top))
sp = norms[N_BPE:tok.vocab_size]
padding_rows = norms[tok.vocab_size:]
print(tr("  special tokens' rows: mean length {s:.3f}; padding rows: mean {p:.3f}, max {pm:.3f}",
        "  特殊词元的行：平均长度 {s:.3f}；填充行：平均 {p:.3f}，最大 {pm:.3f}",
        s=sp.mean().item(), p=padding_rows.mean().item() if len(padding_rows) else float("nan"),
        pm=padding_rows.max().item() if len(padding_rows) else float("nan")))
print(tr("  Rare tokens get few gradient updates in training, so their rows stay near where they started;\n"
        "  rows that are never used (padding, most special tokens) show what the starting point was.",
        "  罕见的词元在训练中很少得到梯度更新，所以它们的行停在初始值附近；\n"
        "  从没用过的行（填充行、大部分特殊词元）显示了初始值是什么样子。"))

# %% [markdown]
# ## 4. Neighbours / 近邻

# %%
title("4. Nearest neighbours by cosine", "4. 按余弦相似度找最近的词元")
words = [" king", " Paris", " running", "猫", "北京", " 2024"]
queries = [w for w in words if len(tok.encode(w)) == 1]
qids = [tok.encode(w)[0] for w in queries]
scores = logits(E[qids], E)[:, :N_BPE]                               # (queries, vocab): h . E[i], fp32
cos = scores / (norms[qids, None] * norms[None, :N_BPE])             # cosine = dot / both lengths
for w, i, row in zip(queries, qids, cos):
    others = [j for j in row.topk(6).indices.tolist() if j != i][:5]
    print(f"  {pad(repr(w), 12)} -> " + ", ".join(f"{tok.readable(j)!r} {row[j]:.2f}" for j in others))
print(tr("  Nothing told the model which words are alike: the table learned it from their contexts.",
        "  没有人告诉模型哪些词相近：嵌入表是从上下文里学到的。"))

# %% [markdown]
# ## 5. Back to scores: logit = h . E / 变回分数：logit = h . E

# %%
title("5. The same table scores every token: logits = h @ E.T", "5. 同一张表给每个词元打分：logits = h @ E.T")
print(tr("  tie_word_embeddings = {t}: the output layer is this table, so the score of token i is h . E[i].",
        "  tie_word_embeddings = {t}：输出层就是这张表，所以词元 i 的分数是 h . E[i]。", t=cfg.tie_word_embeddings))
for i, row in zip(qids[:4], scores):                                 # the logits from section 4
    rank = int((row > row[i]).sum()) + 1
    print(tr("  h = E[{i}] ({w!r}): its own logit {s:.2f} (= |E[i]|^2) ranks #{r} of {n:,}; the top is {top!r}",
            "  h = E[{i}]（{w!r}）：它自己的 logit {s:.2f}（= |E[i]|^2）排第 {r} 名（共 {n:,} 个）；第一名是 {top!r}",
            i=i, w=tok.readable(i), s=row[i].item(), r=rank, n=N_BPE, top=tok.readable(int(row.argmax()))))
print(tr("  A dot product rewards length as well as direction: long rows can outscore the row itself.",
        "  点积既看方向也看长度：更长的行可能比这一行自己的分数还高。"))

# %% [markdown]
# ## 6. Why the final norm's scale matters / 为什么最后的归一化的尺度很重要

# %%
title("6. The size of h sets how sharp the prediction is", "6. h 的大小决定预测有多确定")
base = scores[0] / E[qids[0]].float().pow(2).mean().sqrt()            # logits of h = E[i] / RMS(E[i])
for scale in (1.0, 2.0, 4.0, 8.0):                                   # logits grow linearly with h
    probs = torch.softmax(scale * base, dim=-1)
    print(tr("  RMS(h) = {s:<4g} top probability {p:.3f}, entropy {e:.2f} nats",
            "  RMS(h) = {s:<4g} 最高概率 {p:.3f}，熵 {e:.2f} nats", s=scale, p=probs.max().item(),
            e=-(probs * probs.clamp_min(1e-30).log()).sum().item()))
print(tr("  The same direction, scaled up, gives a sharper distribution. RMSNorm sets RMS(h) to 1, and the\n"
        "  final norm's learned scale (1 + w) then sets the temperature to fit this table's row lengths:\n"
        "  chapter 3 measures it on the real weights.",
        "  方向不变、只放大，分布就更尖锐。RMSNorm 把 RMS(h) 变成 1，最后的归一化学到的缩放 (1 + w)\n"
        "  再按照这张表的行长调好“温度”：第 3 章会在真实权重上测量它。"))
print(tr("  parameters in the table: {n}", "  嵌入表的参数量：{n}", n=count(E.numel())))
print("\n" + tr("Exercises for this chapter: 203. Try one: python practice/judge.py 203",
                "本章练习：203。试一个：python practice/judge.py 203"))
