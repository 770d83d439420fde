# %% [markdown]
# # Chapter 8 · The whole model / 第 8 章 · 整个模型
#
# Chapters 2-7 built every part: the embedding, the norms, RoPE, the MLP, full attention and
# Gated DeltaNet. Here they are stacked into Qwen3.5 (`qwen/model.py`): 24 decoder layers over a
# residual stream, each `x + mixer(norm(x))` then `x + mlp(norm(x))`, a final norm, and the
# output layer tied to the embedding. One real sentence goes through it, and we watch the
# stream grow, read the model's guess after every layer (the logit lens), look at a real
# attention pattern, and check the logits against transformers.
#
# 第 2-7 章做出了每一个部件：嵌入、归一化、RoPE、MLP、全注意力和 Gated DeltaNet。本章把它们叠成
# Qwen3.5（`qwen/model.py`）：残差流上的 24 个解码层，每层先 `x + mixer(norm(x))` 再
# `x + mlp(norm(x))`，最后一个归一化，输出层与嵌入表共享权重。让一句真实的句子穿过整个模型：
# 看残差流如何增长，逐层读出模型的猜测（logit lens），看一个真实的注意力模式，并与 transformers 对比 logits。
#
# Run: `python ch08_model.py [--model PATH] [--tiny] [--lang zh] [--plot] [--text "..."] [--mine]`

# %%
import gc
import time

import torch

import qwen.model
from engine.cli import chapter, count, pad, say, section, show_code, size
from qwen.lang import tr
from practice.mine import put_in
from qwen.model import load_model
from qwen.rope import apply_rope
from engine.threads import note

ch = chapter("Chapter 8: the whole model", "第 8 章：整个模型", plot=True, mine=True, options={
    "--text": dict(default=None, help=("the sentence to run (default: 'The capital of France is', in either language)",
                                       "要运行的句子（默认：'The capital of France is'，中英文输出相同）")),
    "--no-reference": dict(action="store_true", help=("skip the comparison with transformers",
                                                       "跳过与 transformers 的对比"))})

# %% [markdown]
# ## The code / 代码
# What this chapter is about, the decoder layer, the model's forward and its loading: `qwen/model.py`, the whole file,
# read from the module itself (never a second copy): shown in a notebook, printed with `--code`, else where it is.
#
# 本章讲的东西：解码层、整个模型的前向计算和加载：`qwen/model.py` 的完整文件，直接从模块读出（不是另一份拷贝）：
# notebook 里直接显示，`--code` 打印，否则只说它在哪里。

# %%
taught = show_code(ch, qwen.model)
args, path, cfg, tok = ch.args, ch.path, ch.cfg, ch.tokenizer
torch.set_grad_enabled(False)

# %% [markdown]
# ## 1. Build it from the config, fill it from the weights / 按配置搭建，用权重填满
# `load_model` builds the modules on the "meta" device (shapes, no memory), then loads every
# tensor key by key, strictly: each is read once and converted once to fp32. The vision tower
# is loaded too, into `model.visual` (chapter 10 uses it), and the multi-token-prediction head
# into `model.mtp` (chapter 12).
#
# `load_model` 先在 "meta" 设备上搭出各个模块（只有形状，不占内存），再逐个键严格加载每个张量：
# 每个张量只读一次、只转换一次（转成 fp32）。视觉塔也会加载，放在 `model.visual` 里（第 10 章用它）；
# 多词元预测头放在 `model.mtp` 里（第 12 章）。

# %%
section(1, "Build the model and load it", "搭建模型并加载权重")
start = time.perf_counter()
model = load_model(path)
seconds = time.perf_counter() - start
params = sum(p.numel() for p in model.parameters())
params_n, params_size = count(params), size(sum(p.nbytes for p in model.parameters()))
say("  {n} parameters in fp32: {b}, loaded in {s:.1f} s", "  {n} 个参数，fp32：{b}，加载用时 {s:.1f} 秒",
    n=params_n, b=params_size, s=seconds)
if model.visual is not None:
    visual_n = count(sum(p.numel() for p in model.visual.parameters()))
    say("  of them in the vision tower (chapter 10): {n}", "  其中视觉塔（第 10 章）：{n}", n=visual_n)
note(ch.threads)
pattern = " ".join("F" if layer.kind == "full_attention" else "L" for layer in model.layers)
say("  layers (L = Gated DeltaNet, F = full attention): {p}", "  各层（L = Gated DeltaNet，F = 全注意力）：{p}",
    p=pattern)
if model.unused:
    unused = tr(", ", "、").join(model.unused)
    say("  tensors in the folder the model has no place for (not read): {names}",
        "  文件夹里模型用不到的张量（没有读取）：{names}", names=unused)
output_layer = (tr("the embedding table itself (tied)", "就是嵌入表本身（共享权重）") if cfg.tie_word_embeddings
                else tr("its own lm_head.weight", "独立的 lm_head.weight"))
say("  output layer: {how}", "  输出层：{how}", how=output_layer)

# %% [markdown]
# ## 2. One sentence through the residual stream / 一句话穿过残差流
# Every layer adds to the stream; nothing ever normalizes the stream itself (Pre-Norm), so its
# size (root mean square per token) can only be read, layer by layer.
#
# 每一层都往残差流上加东西；没有哪一步对残差流本身做归一化（前置归一化），所以它的大小（每个词元的
# 均方根）只能逐层读出来看。

# %%
section(2, "The residual stream, layer by layer", "残差流，逐层观察")
if tok is not None:
    text = args.text or "The capital of France is"              # examples do not change with --lang (TERMINOLOGY.md)
    ids = tok.encode(text)
    readable = tok.readable
    n_ids, shown_pieces = len(ids), " | ".join(readable(i) for i in ids)
    say("  text: {t!r} -> {n} tokens: {p}", "  文本：{t!r} -> {n} 个词元：{p}", t=text, n=n_ids, p=shown_pieces)
else:                                                             # a folder without tokenizer files
    ids = [i % cfg.vocab_size for i in (11, 12, 13, 14, 15)]
    readable = lambda i: f"#{i}"                                  # noqa: E731
    say("  (no tokenizer files in this folder: token ids {ids} instead of a sentence)",
        "  （这个文件夹里没有分词器文件：用词元编号 {ids} 代替句子）", ids=ids)
yours = put_in(model, ids) if args.mine else None       # --mine: your solved exercises in the model from here on
stream = []
logits = model(torch.tensor([ids]), keep=stream)                  # stream[0]: embedding, stream[i+1]: after layer i
rms = [s[0].float().pow(2).mean(-1).sqrt() for s in stream]       # (tokens,) per point
header = "  " + "  ".join(pad(h, w, right=True) for h, w in ((tr("after", "之后"), 6), (tr("kind", "类型"), 5),
                                                           (tr("RMS last token", "末词元均方根"), 14), (tr("RMS mean", "平均均方根"), 14)))
print(header)
for i, r in enumerate(rms):
    where = pad(tr("embed", "嵌入") if i == 0 else str(i - 1), 6, right=True)
    kind = "" if i == 0 else model.layers[i - 1].kind[0].upper()
    last_rms, mean_rms = r[-1].item(), r.mean().item()
    print(f"  {where}  {kind:>5}  {last_rms:>14.3f}  {mean_rms:>14.3f}")
growth = (rms[-1][-1] / rms[0][-1]).item()
say("  the stream's RMS grows {x:.1f}x from the embedding to the last layer (last token)",
    "  从嵌入到最后一层，残差流的均方根增大了 {x:.1f} 倍（最后一个词元）", x=growth)
if ch.tiny:
    say("  (made-up weights: how the stream grows here says nothing about Qwen3.5)",
        "  （编造的权重：这里残差流的增长与 Qwen3.5 无关）")
if getattr(args, "plot", False) and (plt := ch.pyplot()):
    tiny_note = ("\n" + ch.label("tiny checkpoint: made-up numbers", "小检查点：数值是编造的")) if ch.tiny else ""
    after = [ch.label("embed", "嵌入")] + [str(i) for i in range(len(rms) - 1)]   # the table's first column
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(range(len(rms)), [r[-1].item() for r in rms], marker="o", label=ch.label("last token", "最后一个词元"))
    ax.plot(range(len(rms)), [r.mean().item() for r in rms], marker=".", label=ch.label("mean", "平均"))
    ax.set_xticks(range(len(rms)), after)
    ax.set_xlabel(ch.label("after", "之后"))
    ax.set_ylabel("RMS")
    ax.set_yscale("log")
    ax.set_title(ch.label("The residual stream's RMS after each layer", "每层之后残差流的 RMS") + tiny_note, fontsize=10)
    ax.legend()
    ch.save(fig, "ch08_stream_rms.png")

# %% [markdown]
# ## 3. The logit lens / logit lens：逐层读出猜测
# Put the stream after layer i through the final norm and the output layer, as if the model
# stopped there: what would it predict next? Early layers rarely know; the answer usually
# settles in the last few layers.
#
# 把第 i 层之后的残差流送进最后的归一化和输出层，就好像模型在这里停下：它会预测哪个词元？
# 前面的层很少知道答案；答案通常在最后几层才定下来。

# %%
section(3, "The logit lens: the next token read after every layer", "logit lens：每层之后读出的下一个词元")
for i, s in enumerate(stream):
    p = model.logits(model.norm(s[:, -1:]))[0, -1].softmax(-1)      # (vocab,)
    top = int(p.argmax())
    where = pad(tr("embed", "嵌入") if i == 0 else str(i - 1), 6, right=True)
    guess, p_top = pad(repr(readable(top)), 20), p[top].item()
    print(f"  {where}  {guess} p = {p_top:.3g}")
if ch.tiny:
    say("  (made-up weights: these guesses are not interpreted)", "  （编造的权重：这些猜测不做解读）")

# %% [markdown]
# ## 4. The next token / 下一个词元

# %%
section(4, "The next token: top 5 after the last layer", "下一个词元：最后一层之后的前 5 名")
probs = logits[0, -1].softmax(-1)
top = probs.topk(5)
for p, i in zip(top.values.tolist(), top.indices.tolist()):
    piece = readable(i)
    print(f"  {p:9.3g}  {piece!r}")
lens_gap = (model.logits(model.norm(stream[-1]))[0, -1] - logits[0, -1]).abs().max().item()
say("  check: the lens after the last layer is exactly these logits: max |difference| = {d:.1e}",
    "  核对：logit lens 在最后一层之后读出的就是这些 logits：最大差 = {d:.1e}", d=lens_gap)

# %% [markdown]
# ## 5. A real attention pattern / 一个真实的注意力模式
# Chapter 6 had to feed its attention layer something made up: the real input of a full-attention
# layer is the residual stream after the Gated DeltaNet layers before it. Now we have it.
#
# 第 6 章只能给注意力层喂编造的输入：全注意力层真正的输入，是它前面那些 Gated DeltaNet 层之后的
# 残差流。现在我们有了它。

# %%
layer_index = cfg.full_attention_layers[0]
section(5, f"The attention pattern of layer {layer_index} on the model's own stream",
        f"第 {layer_index} 层在模型自己的残差流上的注意力模式")
layer = model.layers[layer_index]
attn = layer.self_attn
h = layer.input_layernorm(stream[layer_index])                    # what the layer's attention reads
T, H, KV, D = h.shape[1], attn.heads, attn.kv_heads, attn.head_dim
q, gate = attn.q_proj(h).view(1, T, H, 2, D).unbind(3)
q = attn.q_norm(q).transpose(1, 2)                                # (1, H, T, D)
k = attn.k_norm(attn.k_proj(h).view(1, T, KV, D)).transpose(1, 2)   # (1, KV, T, D)
v = attn.v_proj(h).view(1, T, KV, D).transpose(1, 2)
cos, sin = model.rotary(torch.arange(T))
q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)   # head h reads kv head h // group
scores = (q @ k.transpose(-1, -2)) / D ** 0.5                     # (1, H, T, T)
scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
weights = scores.softmax(-1)                                      # (1, H, T, T)
mine = attn.o_proj(((weights @ v).transpose(1, 2).reshape(1, T, H * D)) * gate.reshape(1, T, H * D).sigmoid())
hand_gap = (mine - attn(h, cos, sin)).abs().max().item()
say("  by hand = the module's output: max |difference| = {d:.1e}", "  手算 = 模块的输出：最大差 = {d:.1e}", d=hand_gap)
mean = weights[0].mean(0)                                         # (T, T), averaged over heads
pieces = [readable(i) for i in ids]
last_piece = pieces[-1]
say("  the last token {t!r} attends most to:", "  最后一个词元 {t!r} 最关注：", t=last_piece)
for w, j in zip(*[x.tolist() for x in mean[-1].topk(min(3, T))]):
    print(f"    {w:6.3f}  #{j} {pieces[j]!r}")
for head in range(H):
    j = int(weights[0, head, -1].argmax())
    head_weight = weights[0, head, -1, j].item()
    say("    head {h}: #{j} {p!r} ({w:.2f})", "    头 {h}：#{j} {p!r}（{w:.2f}）", h=head, j=j, p=pieces[j], w=head_weight)
if ch.tiny:
    say("  (made-up weights: the pattern is not interpreted)", "  （编造的权重：这个模式不做解读）")
if getattr(args, "plot", False) and (plt := ch.pyplot()):
    tiny_note = ("\n" + ch.label("tiny checkpoint: made-up numbers", "小检查点：数值是编造的")) if ch.tiny else ""
    labels = ch.ticks(ids, pieces)                                # a piece no installed font can draw: its id
    fig, ax = plt.subplots(figsize=(5, 4.5))
    image = ax.imshow(mean.numpy(), cmap="viridis")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label=ch.label("attention weight", "注意力权重"))
    ax.set_xticks(range(T), labels, rotation=90, fontsize=7)
    ax.set_yticks(range(T), labels, fontsize=7)
    ax.set_xlabel(ch.label("key", "键"))
    ax.set_ylabel(ch.label("query", "查询"))
    ax.set_title(ch.label("layer {i}, mean over heads", "第 {i} 层，各头平均", i=layer_index) + tiny_note, fontsize=10)
    ch.save(fig, "ch08_attention.png")

# %% [markdown]
# ## 6. Against transformers / 与 transformers 对比
# The same checkpoint through transformers' Qwen3.5 (when it is installed): our logits should
# equal its logits up to float rounding. Our model is freed first, so only one is in memory.
#
# 同一个检查点走一遍 transformers 的 Qwen3.5（装了 transformers 时）：我们的 logits 应当与它的
# logits 只差浮点舍入。先释放我们的模型，所以内存里只有一个模型。

# %%
section(6, "Our logits against transformers'", "我们的 logits 与 transformers 的对比")
try:
    import transformers
except ImportError:
    transformers = None
if transformers is None or args.no_reference:
    say("  skipped (transformers is not installed, or --no-reference)", "  跳过（没有安装 transformers，或用了 --no-reference）")
else:
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    del model, stream
    gc.collect()
    reference = transformers.Qwen3_5ForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    theirs = reference(input_ids=torch.tensor([ids])).logits.float()
    n_ids, vocab = len(ids), theirs.shape[-1]
    reference_gap, largest_logit = (logits - theirs).abs().max().item(), theirs.abs().max().item()
    same_next = int(theirs[0, -1].argmax()) == int(logits[0, -1].argmax())
    say("  largest |ours - transformers| over {n} x {v:,} logits: {d:.1e} (largest logit {m:.1f})",
        "  在 {n} x {v:,} 个 logits 上，|我们 - transformers| 的最大值：{d:.1e}（最大的 logit 为 {m:.1f}）",
        n=n_ids, v=vocab, d=reference_gap, m=largest_logit)
    say("  same next token: {same}", "  下一个词元相同：{same}", same=same_next)

# %% [markdown]
# ## How to explain it / 怎么讲给别人听
# A decoder-only transformer is a residual stream that every layer reads through a norm and adds
# to: x + mixer(norm(x)), then x + mlp(norm(x)). Qwen3.5 mixes tokens with full attention in one
# layer of four and with Gated DeltaNet (a fixed-size, corrected memory) in the others; the final
# norm and the tied embedding turn the last vector into a score for every token. Reading the
# stream through that final step after each layer (the logit lens) shows where a guess forms.
#
# 只有解码器的 Transformer 就是一条残差流：每一层先通过归一化读它，再往上加：x + mixer(norm(x))，
# 然后 x + mlp(norm(x))。Qwen3.5 每四层里有一层用全注意力混合词元，其余用 Gated DeltaNet（固定大小、
# 会被修正的记忆）；最后的归一化和共享的嵌入表把最后一个向量变成每个词元的分数。在每层之后都用这最后一步
# 去读残差流（logit lens），就能看到猜测是在哪里形成的。
#
# ## Summary / 小结
# - Qwen35 = embedding, 24 DecoderLayers (Pre-Norm), final RMSNorm, output tied to the embedding.
# - load_model: built on "meta", each tensor read once and converted once, strictly, with the vision tower and the MTP head.
# - Our logits equal transformers' to float rounding (printed above; tests/test_model.py checks 1e-4).
#
# - Qwen35 = 嵌入、24 个解码层（Pre-Norm）、最后的 RMSNorm、与嵌入表共享的输出层。
# - load_model：先在 "meta" 上搭建，每个张量只读一次、只转换一次，严格加载，连同视觉塔和 MTP 头。
# - 我们的 logits 与 transformers 的只差浮点舍入（上面打印了；tests/test_model.py 检查 1e-4）。

# %%
say("\nExercise for this chapter: 230. Next: python ch09_generate.py",
    "\n本章练习：230。下一章：python ch09_generate.py")
