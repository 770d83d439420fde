# %% [markdown]
# # Chapter 12 · Reading ahead: the MTP head drafts, the model checks / 第 12 章 · 往前多看一步：MTP 头起草，模型验证
#
# The checkpoint holds 15 tensors that chapters 1-11 never read: `mtp.*`, the multi-token
# prediction head. It is one more decoder layer, trained to guess the token after the next one.
# A guess is cheap (one layer instead of 24), and the model can check several guesses in one
# forward pass, about as fast as it reads one token: that is speculative decoding. The head
# drafts k tokens, the model verifies them all at once and keeps the ones it would have chosen
# itself, so the greedy reply stays exactly chapter 9's, token for token, only faster when the
# head guesses well. `qwen/mtp.py` builds the head and the draft-verify loop.
#
# 检查点里有 15 个张量，第 1-11 章从没读过：`mtp.*`，即多词元预测（MTP）头。它是多出来的一个解码层，
# 训练目标是猜下一个词元之后的那个词元。猜一次很便宜（一层，而不是 24 层），而模型在一次前向计算里
# 验证好几个草稿，和读一个词元差不多快：这就是投机解码。MTP 头先起草 k 个词元，模型一次验证全部，
# 只留下它自己也会选的那些，所以贪心回复和第 9 章的逐词元完全相同，只是在 MTP 头猜得准的时候更快。
# `qwen/mtp.py` 实现了这个头和“起草、验证”的循环。
#
# Run: `python ch12_mtp.py [--prompt "..."] [--speculative K] [--max-new-tokens N] [--tiny] [--lang zh] [--plot]`

# %%
import inspect
import time
from pathlib import Path

import torch
import torch.nn as nn

import qwen
from qwen import plots
from qwen.cli import CHAPTER_REPLY_TOKENS, chapter, count, say, section, speculative_option
from qwen.generate import ChatTemplate, generate_ids, prompt_ids, stop_ids
from qwen.lang import QwenError, tr
from qwen.model import DecoderLayer, load_model
from qwen.mtp import DraftVocabulary, MTPHead, accepted, coverage, frequent_tokens, speculative_ids
from qwen.norm import RMSNorm
from qwen.threads import note
from qwen.weights import load

ch = chapter("Chapter 12: reading ahead with the MTP head", "第 12 章：用 MTP 头往前多看一步", plot=True, options={
    "--prompt": dict(default=None, help=("the message to send (default: chapter 9's)", "要发送的消息（默认：第 9 章的那句）")),
    "--speculative": dict(default="3", metavar="K", help=(
        "tokens the head drafts per step (default 3)", "MTP 头每步起草的词元数（默认 3）")),
    "--max-new-tokens": dict(type=int, default=CHAPTER_REPLY_TOKENS, help=(
        f"longest reply, in tokens (default {CHAPTER_REPLY_TOKENS})", f"回复的最大词元数（默认 {CHAPTER_REPLY_TOKENS}）"))})
args, path, cfg, tok = ch.args, ch.path, ch.cfg, ch.tokenizer
torch.set_grad_enabled(False)
K = speculative_option(args.speculative)                 # one line for a bad K, before the weights are read
if args.max_new_tokens < 1:
    raise QwenError("--max-new-tokens must be at least 1.", "--max-new-tokens 至少为 1。")
try:                                                     # chat_template.jinja, else tokenizer_config.json's
    template = ChatTemplate.load(path)
except QwenError:
    template = None
has_head = any(name.startswith("mtp.") for name in ch.W.all_names)
ready = has_head and tok is not None and template is not None
if not has_head:                                         # checked first: without it, the weights need not be read
    say("  (this checkpoint has no MTP head, no mtp.* tensors (transformers' save_pretrained drops them):\n"
        "  speculative decoding is unavailable with it, and this chapter stops here)",
        "  （这个检查点没有 MTP 头，即没有 mtp.* 张量（transformers 的 save_pretrained 会丢掉它们）：\n"
        "  用它不能做推测解码，本章到此为止）")
elif not ready:
    say("  (no tokenizer or chat template in this folder: this chapter needs both; it stops here)",
        "  （这个文件夹里没有分词器或对话模板：本章两者都需要，到此为止）")
else:
    model = load_model(path)
    V = tok.vocab_size                                   # ids past it are padding rows (chapter 9)
if ready and ch.tiny:
    say("  The tiny checkpoint's weights are random, its MTP head's too: the head guesses almost never right,\n"
        "  and every acceptance below is chance. The mechanism is shown with replayed drafts (section 4).",
        "  小检查点的权重是随机的，MTP 头的也是：MTP 头几乎从不猜对，下面的接受率都只是巧合。\n"
        "  机制用重放的草稿来演示（第 4 节）。")

# %% [markdown]
# ## 1. The head by hand / 手写 MTP 头
# The model has read tokens 0..t and its last hidden state h_t (after the final norm) gave
# token t + 1. The head takes two things: the embedding of token t + 1 and h_t. Each gets its
# own RMSNorm; they are concatenated, embedding first, and `fc` maps the 2 x hidden numbers back
# to hidden. One full-attention decoder layer follows, with its own KV cache (the head reads the
# text too, one entry per position), then `mtp.norm`, then the model's own output layer: the
# head has no output layer of its own. Its result is a guess for token t + 2.
# vLLM and SGLang both hand the head the hidden state after the final norm (`qwen/mtp.py` cites
# where); a port that takes it before the norm, or concatenates in the other order, still runs,
# and guesses worse (section 2 measures both).
#
# 模型读完词元 0..t，它最后的隐藏状态 h_t（最终归一化之后）给出了词元 t + 1。MTP 头读两样东西：
# 词元 t + 1 的嵌入和 h_t。两者各过一个 RMSNorm，拼接起来（嵌入在前），`fc` 把 2 x hidden 个数映射回
# hidden。接着是一个全注意力解码层，有自己的键值缓存（MTP 头也读这段文本，每个位置一项），然后是
# `mtp.norm`，最后用模型自己的输出层：MTP 头没有自己的输出层。结果是对词元 t + 2 的猜测。
# vLLM 和 SGLang 交给 MTP 头的都是最终归一化之后的隐藏状态（`qwen/mtp.py` 注明了出处）；
# 如果移植时取了归一化之前的，或者拼接顺序反了，代码照样能跑，只是猜得更差（第 2 节测量这两种情况）。

# %%
TEXT = ("A language model gives scores for the next token only. To write a reply we pick a token, append it, "
        "and ask again, until it says it is done. "
        "语言模型只给出下一个词元的分数。要写出回复，就选一个词元、接到后面、再问一次，直到它表示结束。")
if ready:
    section(1, "The head by hand, on the checkpoint's mtp.* tensors", "在检查点的 mtp.* 张量上手写 MTP 头")
    W, H, eps = ch.W, cfg.hidden_size, cfg.rms_norm_eps
    names = sorted(n for n in W.all_names if n.startswith("mtp."))
    head_params = sum(p.numel() for p in model.mtp.parameters())
    say("  {n} tensors under mtp.*: {p} parameters, {r:.1%} of the language model's {m} (the output layer is shared)",
        "  mtp.* 下有 {n} 个张量：{p} 个参数，占语言模型 {m} 个参数的 {r:.1%}（输出层是共享的）",
        n=len(names), p=count(head_params), m=count(sum(p.numel() for p in model.parameters()) - head_params),
        r=head_params / (sum(p.numel() for p in model.parameters()) - head_params))
    ids = tok.encode(TEXT)                                                # T tokens, the same in both languages
    T = len(ids)
    keep = []
    main_logits = model(torch.tensor([ids]), keep=keep)[0]                # (T, vocab)
    hidden = model.norm(keep[-1])                                         # (1, T, H): after the final norm
    # by hand, from the file: each part loaded strictly under its name, in fp32 as the model computes
    norm_e = load(RMSNorm(H, eps), W, "mtp.pre_fc_norm_embedding.").float()
    norm_h = load(RMSNorm(H, eps), W, "mtp.pre_fc_norm_hidden.").float()
    fc = load(nn.Linear(2 * H, H, bias=False), W, "mtp.fc.").float()
    layer = load(DecoderLayer(cfg, None, kind="full_attention"), W, "mtp.layers.0.").float()
    norm = load(RMSNorm(H, eps), W, "mtp.norm.").float()
    nxt = torch.tensor([ids[1:]])                                         # (1, T-1): token t + 1 for t = 0..T-2
    e = norm_e(model.embed_tokens(nxt))                                   # (1, T-1, H)
    h = norm_h(hidden[:, :-1])                                            # (1, T-1, H): h_t
    x = fc(torch.cat([e, h], -1))                                         # (1, T-1, 2H) -> (1, T-1, H)
    cos, sin = model.rotary(torch.arange(T - 1))                         # the pair for h_t sits at position t
    g = norm(layer(x, cos, sin))                                          # (1, T-1, H)
    guess_logits = model.logits(g)[0]                                     # (T-1, vocab): guesses for t + 2
    module = model.mtp(model.embed_tokens(nxt), hidden[:, :-1], cos, sin)   # the library's head
    say("  {t} tokens of: {text!r}...", "  {t} 个词元：{text!r}……", t=T, text=TEXT[:40])
    say("  embed(token t + 1) {a} and h_t {b}, each RMSNorm'd -> cat {c} -> fc {d} -> decoder layer -> mtp.norm {f}",
        "  embed(词元 t + 1) {a} 和 h_t {b} 各自过 RMSNorm -> 拼接 {c} -> fc {d} -> 解码层 -> mtp.norm {f}",
        a=list(e.shape), b=list(h.shape), c=[1, T - 1, 2 * H], d=list(fc.weight.shape), f=list(g.shape))
    say("  -> the shared output layer: {s} logits, a guess for token t + 2 at every position",
        "  -> 共享的输出层：{s} 个 logit，每个位置都是对词元 t + 2 的猜测", s=list(guess_logits.shape))
    say("  by hand == the library's MTPHead (qwen/mtp.py): max |difference| {d:.1e}",
        "  手算 == 库里的 MTPHead（qwen/mtp.py）：最大 |差值| {d:.1e}", d=(g - module).abs().max().item())
    if plots.in_notebook():                                               # the module's code, where a notebook reads it
        print(inspect.getsource(MTPHead.forward))
    else:
        say("  (the module's code: qwen/mtp.py, MTPHead.forward; a notebook prints it here)",
            "  （模块的代码：qwen/mtp.py 的 MTPHead.forward；在笔记本里会直接打印在这里）")

# %% [markdown]
# ## 2. How often the head sees it coming / MTP 头多常猜中
# Teacher forcing: feed the head the text's own tokens (not its guesses) and compare, at every
# position, its guess for token t + 2 with what the model itself would choose there (its greedy
# token after reading t + 1). That agreement is what speculative decoding cashes in: a draft is
# kept exactly when it equals the model's choice. The same for the two wrong inputs of section 1.
#
# 教师强制：喂给 MTP 头的是文本自己的词元（不是它的猜测），在每个位置上比较它对词元 t + 2 的猜测和
# 模型自己在那里会选的词元（读完 t + 1 之后的贪心选择）。投机解码得到的好处就来自这种一致：
# 草稿正好在等于模型的选择时被接受。第 1 节的两种错误输入也一样测量。

# %%
if ready:
    section(2, "Teacher-forced acceptance on a text", "在一段文本上用教师强制测接受率")
    greedy = main_logits[:, :V].argmax(-1)                                # (T,): the model's token after each
    target = greedy[1:]                                                   # (T-1,): its choice for t + 2
    before_norm = keep[-1]                                                # the stream before the final norm


    def agreement(e_in, h_in, swap=False):
        """Share of positions where the head's guess for t + 2 is the model's greedy token there."""
        parts = [norm_h(h_in), norm_e(e_in)] if swap else [norm_e(e_in), norm_h(h_in)]
        guess = model.logits(norm(layer(fc(torch.cat(parts, -1)), cos, sin)))[0, :, :V].argmax(-1)
        return (guess == target).float().mean().item(), guess


    right, guesses = agreement(model.embed_tokens(nxt), hidden[:, :-1])
    swapped, _ = agreement(model.embed_tokens(nxt), hidden[:, :-1], swap=True)
    unnormed, _ = agreement(model.embed_tokens(nxt), before_norm[:, :-1])
    text_hits = (guesses[:-1] == torch.tensor(ids[2:])).float().mean().item()
    model_hits = (greedy[:-1] == torch.tensor(ids[1:])).float().mean().item()
    say("  the head's guess for token t + 2 = the model's greedy token there: {n} of {m} positions ({a:.0%})",
        "  MTP 头对词元 t + 2 的猜测 = 模型在那里的贪心选择：{m} 个位置中有 {n} 个（{a:.0%}）",
        n=round(right * (T - 1)), m=T - 1, a=right)
    say("  the same with the inputs concatenated hidden first: {s:.0%}; with h_t taken before the final norm: {u:.0%}",
        "  同样的测量，拼接时隐藏状态在前：{s:.0%}；h_t 取自最终归一化之前：{u:.0%}", s=swapped, u=unnormed)
    say("  against the text itself: the model's next token is the text's at {a:.0%} of positions, the head's "
        "token t + 2 at {b:.0%}",
        "  与文本本身比较：模型的下一个词元在 {a:.0%} 的位置上与文本相同，MTP 头的词元 t + 2 在 {b:.0%} 的位置上相同",
        a=model_hits, b=text_hits)
    if ch.tiny:
        say("  (random weights: a guess agrees by chance, about 1 in {v:,}; these shares mean nothing. For the\n"
            "  trained head, third-party reports give 0.65 to 0.8 per draft: not measured here)",
            "  （随机权重：猜中只是巧合，机会约为 {v:,} 分之一；这些比例没有意义。训练过的 MTP 头，\n"
            "  第三方报告的接受率是每个草稿 0.65 到 0.8：这里没有测量）", v=V)

# %% [markdown]
# ## 3. Draft, verify, accept: chapter 9's reply, token for token / 起草、验证、接受：逐词元就是第 9 章的回复
# One step of speculative decoding. p is the token chosen last. The head drafts d_1 .. d_k, each
# guess fed back as its next input. The model reads [p, d_1 .. d_k] in one forward pass and gives
# its own greedy choice y_0 .. y_k after each. The drafts are kept while d_j = y_(j-1); at the
# first disagreement the model's own y there is taken instead. So every token is the one the
# model chooses after exactly the tokens before it: the plain greedy reply, whatever the head
# guesses. A good head only makes it faster (more tokens per forward pass), a bad one slower.
#
# 投机解码的一步。p 是上一步选出的词元。MTP 头起草 d_1 .. d_k，每个猜测都作为它下一步的输入。模型用
# 一次前向计算读入 [p, d_1 .. d_k]，在每个位置之后给出自己的贪心选择 y_0 .. y_k。只要 d_j = y_(j-1)，
# 草稿就被接受；遇到第一个不一致时，取模型自己在那里的 y。所以每个词元都是模型在它之前那些词元之后
# 会选的词元：不管 MTP 头猜什么，结果都是普通贪心解码的回复。好的 MTP 头只让它更快（每次前向计算得到
# 更多词元），差的让它更慢。

# %%
if ready:
    section(3, "A speculative reply against chapter 9's greedy reply", "推测解码的回复与第 9 章贪心回复的对比")
    say("  the accept rule on a made-up step: drafts {d}, the model's choices {y} -> accepted {r}",
        "  在一个编造的步骤上演示接受规则：草稿 {d}，模型的选择 {y} -> 接受结果 {r}",
        d=[5, 7, 9], y=[5, 7, 4, 8], r=accepted([5, 7, 9], [5, 7, 4, 8]))
    prompt = "Say hello in English and in Chinese, in one short sentence. 用一句话打招呼。" if args.prompt is None else args.prompt
    prompt_tokens = prompt_ids(tok, [{"role": "user", "content": prompt}], template=template)
    stop = stop_ids(tok)
    run = dict(max_new_tokens=args.max_new_tokens, stop=stop, vocab=V)
    plain_stats, spec_stats = {}, {}
    plain = list(generate_ids(model, prompt_tokens, stats=plain_stats, **run))
    spec = list(generate_ids(model, prompt_tokens, speculative=K, stats=spec_stats, **run))
    say("  prompt: {p!r} ({n} tokens, chapter 9's)", "  提示词：{p!r}（{n} 个词元，与第 9 章相同）", p=prompt,
        n=len(prompt_tokens))
    say("  reply ({n} tokens): {r!r}", "  回复（{n} 个词元）：{r!r}", n=len(spec), r=tok.decode([t for t in spec if t not in stop]))
    say("  speculative (k = {k}) == plain greedy, token for token: {same}",
        "  推测解码（k = {k}）== 普通贪心解码，逐词元相同：{same}", k=K, same=spec == plain)
    passes = spec_stats["rounds"]
    say("  {n} tokens after the first in {p} verify passes: {r:.2f} tokens per forward pass of the model (plain: 1)",
        "  第一个之后的 {n} 个词元用了 {p} 次验证：模型每次前向计算得到 {r:.2f} 个词元（普通解码：1 个）",
        n=len(spec) - 1, p=passes, r=(len(spec) - 1) / max(passes, 1))
    say("  drafts accepted: {a} of {d} ({s:.0%})", "  被接受的草稿：{d} 个中有 {a} 个（{s:.0%}）",
        a=spec_stats["accepted"], d=spec_stats["drafted"], s=spec_stats["accepted"] / max(spec_stats["drafted"], 1))
    if ch.tiny:
        say("  (random weights: the reply is made-up tokens, and the head's drafts are almost never accepted)",
            "  （随机权重：回复是编造的词元，MTP 头的草稿几乎从不被接受）")

# %% [markdown]
# ## 4. The mechanism, with replayed drafts; rollback / 用重放的草稿看机制；回滚
# To see every path on any checkpoint, the head's drafts are replaced before verification by
# tokens chosen on purpose: the plain run's own next tokens (all accepted), wrong ones (all
# rejected), or a mix. These are replayed drafts, not the head's: they show the mechanism, not
# how well the head guesses. After a rejection the caches must hold what plain decoding would
# hold. A KV cache is cut back to the accepted length. A Gated DeltaNet state cannot be cut: every
# token changed all of it. So while verifying, each linear-attention layer keeps its conv window
# and its state after every token, and the state after the last accepted token is put back,
# exactly, not recomputed.
#
# 为了在任何检查点上看到每一种情况，在验证之前把 MTP 头的草稿换成特意选的词元：普通解码自己的下一个
# 词元（全部接受）、错误的词元（全部拒绝），或者两者混合。这些是重放的草稿，不是 MTP 头的：它们展示的是
# 机制，而不是 MTP 头猜得多好。拒绝之后，缓存里必须是普通解码会有的内容。键值缓存只要截回到接受的长度。
# Gated DeltaNet 的状态截不回去：每个词元都改变了它的全部。所以验证时每个线性注意力层保留每个词元之后的
# 卷积窗口和状态，然后把最后一个被接受的词元之后的状态放回去，精确地放回，而不是重新计算。

# %%
if ready:
    section(4, "Replayed drafts: all accepted, all rejected, a mix; the caches afterwards",
            "重放的草稿：全部接受、全部拒绝、混合；之后的缓存")
    n_replay = min(args.max_new_tokens, 24)
    base = plain[:n_replay]
    wrong = lambda t: (t + 1) % V                                          # never the model's token
    replays = {
        tr("all accepted (the plain run's tokens)", "全部接受（普通解码的词元）"):
            lambda out, drafts: base[len(out):len(out) + len(drafts)],
        tr("all rejected (wrong tokens)", "全部拒绝（错误的词元）"):
            lambda out, drafts: [wrong(t) for t in base[len(out):len(out) + len(drafts)]],
        tr("a mix (right, then wrong from the 2nd draft)", "混合（先对，从第 2 个草稿起错）"):
            lambda out, drafts: base[len(out):len(out) + 1] + [wrong(t) for t in base[len(out) + 1:len(out) + len(drafts)]],
    }
    replay_stats = {}
    for label, replay in replays.items():
        stats, cache = {}, model.new_cache()
        got = list(speculative_ids(model, prompt_tokens, K, max_new_tokens=n_replay, stop=stop, vocab=V, cache=cache,
                                   stats=stats, drafts=replay))
        replay_stats[label] = stats
        say("  {l}: {a} of {d} accepted, {r:.2f} tokens per forward pass; the plain greedy tokens: {same}",
            "  {l}：{d} 个中接受 {a} 个，每次前向计算 {r:.2f} 个词元；与普通贪心解码的词元相同：{same}",
            l=label, a=stats["accepted"], d=stats["drafted"], r=(len(got) - 1) / max(stats["rounds"], 1),
            same=got == base[:len(got)])
    plain_cache = model.new_cache()                                        # plain decoding over the same tokens
    read = prompt_tokens + got[:-1]                                        # the last token was chosen, never read
    model(torch.tensor([prompt_tokens]), cache=plain_cache, last=True)
    for t in got[:-1]:
        model(torch.tensor([[t]]), cache=plain_cache, last=True)
    linear, full = cfg.linear_attention_layers, cfg.full_attention_layers
    state_diff = max((cache[i].state - plain_cache[i].state).abs().max().item() for i in linear)
    conv_diff = max((cache[i].conv - plain_cache[i].conv).abs().max().item() for i in linear)
    kv_diff = max(max((cache[i].k - plain_cache[i].k).abs().max().item(), (cache[i].v - plain_cache[i].v).abs().max().item())
                  for i in full)
    say("  after the mixed run: {n} positions in both caches; Gated DeltaNet states differ from plain decoding's by at most\n"
        "  {s:.1e}, conv windows by {c:.1e}, attention keys and values (cut back) by {kv:.1e}",
        "  混合运行之后：两个缓存都是 {n} 个位置；Gated DeltaNet 状态与普通解码的最大差 {s:.1e}，\n"
        "  卷积窗口 {c:.1e}，注意力的键和值（截回之后）{kv:.1e}",
        n=cache.length if cache.length == plain_cache.length == len(read) else f"{cache.length} != {plain_cache.length}",
        s=state_diff, c=conv_diff, kv=kv_diff)
    say("  (replayed drafts: these counts show the mechanism, not how well any head guesses)",
        "  （重放的草稿：这些数字展示的是机制，不是哪个 MTP 头猜得多好）")
