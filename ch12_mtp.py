# %% [markdown]
# # Chapter 12 · Reading ahead: the MTP head drafts, the model checks / 第 12 章 · 往前多看一步：MTP 头起草，模型验证
#
# The checkpoint holds 15 tensors that chapters 1-11 never read: `mtp.*`, the multi-token
# prediction head. It is one more decoder layer, trained to guess the token after the next one.
# A guess is cheap (one layer instead of 24), and the model can check several guesses in one
# forward pass, about as fast as it reads one token: that is speculative decoding. The head
# drafts k tokens, the model verifies them all at once and keeps the ones it would have chosen
# itself, so the greedy reply stays exactly chapter 9's, token for token (in fp32, as computed
# here; in bf16 a near-tie can flip, section 3), only faster when the head guesses well.
# `qwen/mtp.py` builds the head and the draft-verify loop.
#
# 检查点里有 15 个张量，第 1-11 章从没读过：`mtp.*`，即多词元预测（MTP）头。它是多出来的一个解码层，
# 训练目标是猜下一个词元之后的那个词元。猜一次很便宜（一层，而不是 24 层），而模型在一次前向计算里
# 验证好几个草稿，和读一个词元差不多快：这就是推测解码。MTP 头先起草 k 个词元，模型一次验证全部，
# 只留下它自己也会选的那些，所以贪心回复和第 9 章的逐词元完全相同（在 fp32 下，本章就这样计算；bf16 下
# 几乎并列的词元可能翻转，见第 3 节），只是在 MTP 头猜得准的时候更快。
# `qwen/mtp.py` 实现了这个头和“起草、验证”的循环。
#
# Run: `python ch12_mtp.py [--prompt "..."] [--speculative K] [--max-new-tokens N] [--tiny] [--lang zh] [--plot]`

# %%
import itertools
import re
from pathlib import Path

import torch
import torch.nn as nn

import qwen
import qwen.mtp
from engine.cli import CHAPTER_REPLY_TOKENS, chapter, count, pad, say, section, show_code, speculative_option
from qwen.generate import generate_ids, prompt_ids, stop_ids
from qwen.lang import QwenError, tr
from qwen.model import DecoderLayer, load_model
from engine.speculative import DraftVocabulary, coverage, frequent_tokens, replaying, teacher_forced_acceptance
from qwen.mtp import accept_sampled, accepted, head_problem, load_head, speculative_ids
from qwen.norm import RMSNorm
from engine.threads import note
from qwen.weights import load

ch = chapter("Chapter 12: reading ahead with the MTP head", "第 12 章：用 MTP 头往前多看一步", plot=True, options={
    "--prompt": dict(default=None, help=("the message to send (default: chapter 9's)", "要发送的消息（默认：第 9 章的那句）")),
    "--speculative": dict(default="3", metavar="K", help=(
        "tokens the head drafts per step (default 3)", "MTP 头每步起草的词元数（默认 3）")),
    "--max-new-tokens": dict(type=int, default=None, help=(
        f"longest reply, in tokens (default {CHAPTER_REPLY_TOKENS}; 16 on the tiny checkpoint)",
        f"回复的最大词元数（默认 {CHAPTER_REPLY_TOKENS}；小检查点上 16）"))})


# %% [markdown]
# ## The code / 代码
# What this chapter is about, the MTP head, the accept rule (greedy and sampled) and the draft-and-verify loop:
# `qwen/mtp.py`, the whole file, read from the module itself (never a second copy): shown in a notebook, printed with
# `--code`, else where it is. A checkpoint without the whole head (transformers' save_pretrained drops mtp.*), or a
# folder without a tokenizer or chat template, stops the chapter here, before the weights are read.
#
# 本章讲的东西：MTP 头、接受规则（贪心和采样）以及“起草、验证”的循环：`qwen/mtp.py` 的完整文件，直接从模块读出
# （不是另一份拷贝）：notebook 里直接显示，`--code` 打印，否则只说它在哪里。没有完整 MTP 头的检查点（transformers 的
# save_pretrained 会丢掉 mtp.*），或没有分词器或对话模板的文件夹，让本章在这里停下，在读权重之前。

# %%
taught = show_code(ch, qwen.mtp)
TINY_REPLY_TOKENS = 16                                   # the reply's length on the tiny checkpoint's random weights
args, path, cfg = ch.args, ch.path, ch.cfg
torch.set_grad_enabled(False)
K = speculative_option(args.speculative)                 # one line for a bad K, before the weights are read
if args.max_new_tokens is None:                          # made-up tokens: a few show every path as well as 64
    args.max_new_tokens = TINY_REPLY_TOKENS if ch.tiny else CHAPTER_REPLY_TOKENS
if args.max_new_tokens < 1:
    raise QwenError("--max-new-tokens must be at least 1.", "--max-new-tokens 至少为 1。")
has_head = any(name.startswith("mtp.") for name in ch.W.all_names)   # from the headers: nothing read yet
head_broken = head_problem(cfg, ch.W) if has_head else None    # a tensor missing or mis-shaped: why, in one line
if not has_head:                                         # checked first: without it, nothing else need be read
    say("  (no MTP head in this checkpoint, no mtp.* tensors: speculative decoding is unavailable; this chapter stops here)",
        "  （这个检查点里没有 MTP 头，没有 mtp.* 张量：不能做推测解码；本章到此为止）")
    raise SystemExit(0)
if head_broken is not None:
    why = str(head_broken)
    say("  {why} This chapter needs the whole head: it stops here.", "  {why}本章需要完整的 MTP 头：到此为止。", why=why)
    raise SystemExit(0)
tok, template = ch.needs_chat()                          # without both the chapter stops here
model = load_model(path, vision=False)                   # the text model: the tower is never used here
load_head(model, ch.W)                                   # and its MTP head (model.mtp)
V = tok.vocab_size                                       # ids past it are padding rows (chapter 9)
ch.unproven("the head's guesses", "  The tiny checkpoint's weights are random, its MTP head's too: the head guesses "
            "almost never right,\n  and every acceptance below is chance. The mechanism is shown with replayed "
            "drafts (section 4).",
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
section(1, "The head by hand, on the checkpoint's mtp.* tensors", "在检查点的 mtp.* 张量上手写 MTP 头")
TEXT = ("A language model gives scores for the next token only. To write a reply we pick a token, append it, "
        "and ask again, until it says it is done. "
        "语言模型只给出下一个词元的分数。要写出回复，就选一个词元、接到后面、再问一次，直到它表示结束。")
W, H, eps = ch.W, cfg.hidden_size, cfg.rms_norm_eps
names = sorted(n for n in W.all_names if n.startswith("mtp."))
head_params = sum(p.numel() for p in model.mtp.parameters())
lm_params = sum(p.numel() for name, p in model.named_parameters()          # the tied table counted once;
                if not name.startswith(("mtp.", "visual.")))              # the head and the tower are not the LM
n_names, head_share = len(names), head_params / lm_params
say("  {n} tensors under mtp.*: {p} parameters, {r:.1%} of the language model's {m} (the output layer is shared)",
    "  mtp.* 下有 {n} 个张量：{p} 个参数，占语言模型 {m} 个参数的 {r:.1%}（输出层是共享的）",
    n=n_names, p=count(head_params), m=count(lm_params), r=head_share)
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
text_start = TEXT[:40]
say("  {t} tokens of: {text!r}...", "  {t} 个词元：{text!r}……", t=T, text=text_start)
shapes = [list(e.shape), list(h.shape), [1, T - 1, 2 * H], list(fc.weight.shape), list(g.shape)]
say("  embed(token t + 1) {a} and h_t {b}, each RMSNorm'd -> cat {c} -> fc {d} -> decoder layer -> mtp.norm {f}",
    "  embed(词元 t + 1) {a} 和 h_t {b} 各自过 RMSNorm -> 拼接 {c} -> fc {d} -> 解码层 -> mtp.norm {f}",
    a=shapes[0], b=shapes[1], c=shapes[2], d=shapes[3], f=shapes[4])
guess_shape = list(guess_logits.shape)
say("  -> the shared output layer: {s} logits, a guess for token t + 2 at every position",
    "  -> 共享的输出层：{s} 个 logit，每个位置都是对词元 t + 2 的猜测", s=guess_shape)
hand_gap = (g - module).abs().max().item()
say("  by hand == the library's MTPHead (qwen/mtp.py): max |difference| {d:.1e}",
    "  手算 == 库里的 MTPHead（qwen/mtp.py）：最大 |差值| {d:.1e}", d=hand_gap)

# %% [markdown]
# ## 2. How often the head sees it coming / MTP 头多常猜中
# Teacher forcing: feed the head the text's own tokens (not its guesses) and compare, at every
# position, its guess for token t + 2 with what the model itself would choose there (its greedy
# token after reading t + 1). That agreement is what speculative decoding cashes in: a draft is
# kept exactly when it equals the model's choice. The same for the two wrong inputs of section 1.
#
# 教师强制：喂给 MTP 头的是文本自己的词元（不是它的猜测），在每个位置上比较它对词元 t + 2 的猜测和
# 模型自己在那里会选的词元（读完 t + 1 之后的贪心选择）。推测解码得到的好处就来自这种一致：
# 草稿正好在等于模型的选择时被接受。第 1 节的两种错误输入也一样测量。

# %%
section(2, "Teacher-forced acceptance on a text", "在一段文本上用教师强制测接受率")
greedy = main_logits[:, :V].argmax(-1)                                # (T,): the model's token after each
target = greedy[1:-1]                                                 # (T-2,): its choice for t + 2, t = 0..T-3
before_norm = keep[-1]                                                # the stream before the final norm


def agreement(e_in, h_in, swap=False):
    """Share of positions where the head's guess for t + 2 is the model's greedy token there."""
    parts = [norm_h(h_in), norm_e(e_in)] if swap else [norm_e(e_in), norm_h(h_in)]
    guess = model.logits(norm(layer(fc(torch.cat(parts, -1)), cos, sin)))[0, :-1, :V].argmax(-1)   # (T-2,)
    return (guess == target).float().mean().item(), guess


right, guesses = agreement(model.embed_tokens(nxt), hidden[:, :-1])
swapped, _ = agreement(model.embed_tokens(nxt), hidden[:, :-1], swap=True)
unnormed, _ = agreement(model.embed_tokens(nxt), before_norm[:, :-1])
text_hits = (guesses == torch.tensor(ids[2:])).float().mean().item()
model_hits = (greedy[:-1] == torch.tensor(ids[1:])).float().mean().item()
library, n_guesses = teacher_forced_acceptance(model, ids, V)
positions = T - 2                                                     # each t with a token t + 2 in the text
hits = round(right * positions)
same_count = (round(library * n_guesses), n_guesses) == (hits, positions)
say("  the head's guess for token t + 2 = the model's greedy token there: {n} of {m} positions ({a:.0%})",
    "  MTP 头对词元 t + 2 的猜测 = 模型在那里的贪心选择：{m} 个位置中有 {n} 个（{a:.0%}）", n=hits, m=positions, a=right)
say("  the same count from engine.speculative.teacher_forced_acceptance: {same}", "  engine.speculative.teacher_forced_acceptance 给出同样的结果：{same}",
    same=same_count)
say("  the same with the inputs concatenated hidden first: {s:.0%}; with h_t taken before the final norm: {u:.0%}",
    "  同样的测量，拼接时隐藏状态在前：{s:.0%}；h_t 取自最终归一化之前：{u:.0%}", s=swapped, u=unnormed)
say("  against the text itself: the model's next token is the text's at {a:.0%} of positions, the head's "
    "token t + 2 at {b:.0%}",
    "  与文本本身比较：模型的下一个词元在 {a:.0%} 的位置上与文本相同，MTP 头的词元 t + 2 在 {b:.0%} 的位置上相同",
    a=model_hits, b=text_hits)
ch.unproven("the head's acceptance, teacher-forced",
            "  (random weights: a guess agrees by chance, about 1 in {v:,}; these shares mean nothing. For the\n"
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
# Exactly so in fp32, as this chapter computes; a verify pass sums its k + 1 rows in one matmul,
# not in the order of k + 1 one-row steps, and in bf16 that rounding can flip a near-tie
# (bench/bench_speculative.py prints, for bf16, how many of its tokens matched).
#
# 推测解码的一步。p 是上一步选出的词元。MTP 头起草 d_1 .. d_k，每个猜测都作为它下一步的输入。模型用
# 一次前向计算读入 [p, d_1 .. d_k]，在每个位置之后给出自己的贪心选择 y_0 .. y_k。只要 d_j = y_(j-1)，
# 草稿就被接受；遇到第一个不一致时，取模型自己在那里的 y。所以每个词元都是模型在它之前那些词元之后
# 会选的词元：不管 MTP 头猜什么，结果都是普通贪心解码的回复。好的 MTP 头只让它更快（每次前向计算得到
# 更多词元），差的让它更慢。在 fp32 下（本章就用 fp32）严格如此；一次验证把 k + 1 行放在一个矩阵乘法里算，
# 求和顺序和 k + 1 次单行的解码不同，在 bf16 下这种舍入可能让两个几乎相等的 logit 换位
# （bench/bench_speculative.py 会打印 bf16 下有多少个词元一致）。

# %%
section(3, "A speculative reply against chapter 9's greedy reply", "推测解码的回复与第 9 章贪心回复的对比")
made_drafts, made_choices = [5, 7, 9], [5, 7, 4, 8]
n_ok, after = accepted(made_drafts, made_choices)                     # qwen/mtp.py's rule (exercise 250)
say("  the accept rule on a made-up step: drafts {d}, the model's choices {y} -> {a} accepted, then the model's {n}",
    "  在一个编造的步骤上演示接受规则：草稿 {d}，模型的选择 {y} -> 接受 {a} 个，然后是模型自己的 {n}",
    d=made_drafts, y=made_choices, a=n_ok, n=after)
prompt = "Say hello in English and in Chinese, in one short sentence. 用一句话打招呼。" if args.prompt is None else args.prompt
prompt_tokens = prompt_ids(tok, [{"role": "user", "content": prompt}], template=template)
stop = stop_ids(tok)
run = dict(max_new_tokens=args.max_new_tokens, stop=stop, vocab=V)
plain_stats, spec_stats = {}, {}
plain = list(generate_ids(model, prompt_tokens, stats=plain_stats, **run))
spec = list(speculative_ids(model, prompt_tokens, K, stats=spec_stats, **run))
n_prompt, n_spec, reply_text = len(prompt_tokens), len(spec), tok.decode([t for t in spec if t not in stop])
say("  prompt: {p!r} ({n} tokens, chapter 9's)", "  提示词：{p!r}（{n} 个词元，与第 9 章相同）", p=prompt, n=n_prompt)
say("  reply ({n} tokens): {r!r}", "  回复（{n} 个词元）：{r!r}", n=n_spec, r=reply_text)
speculative_is_greedy = spec == plain
say("  speculative (k = {k}) == plain greedy, token for token: {same}",
    "  推测解码（k = {k}）== 普通贪心解码，逐词元相同：{same}", k=K, same=speculative_is_greedy)
passes, after_first = spec_stats["rounds"], len(spec) - 1
per_pass = after_first / max(passes, 1)
say("  {n} tokens after the first in {p} verify passes: {r:.2f} tokens per forward pass of the model (plain: 1)",
    "  第一个之后的 {n} 个词元用了 {p} 次验证：模型每次前向计算得到 {r:.2f} 个词元（普通解码：1 个）",
    n=after_first, p=passes, r=per_pass)
accepted_share = spec_stats["accepted"] / max(spec_stats["drafted"], 1)
say("  drafts accepted: {a} of {d} ({s:.0%})", "  被接受的草稿：{d} 个中有 {a} 个（{s:.0%}）",
    a=spec_stats["accepted"], d=spec_stats["drafted"], s=accepted_share)
ch.unproven("the drafts accepted in a reply",
            "  (random weights: the reply is made-up tokens, and the head's drafts are almost never accepted)",
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
section(4, "Replayed drafts: all accepted, all rejected, a mix; the caches afterwards",
        "重放的草稿：全部接受、全部拒绝、混合；之后的缓存")
n_replay = min(args.max_new_tokens, 16)
base = plain[:n_replay]
wrong = lambda t: (t + 1) % V                                          # never the model's token
replays = {
    "all": lambda out, drafts: base[len(out):len(out) + len(drafts)],
    "none": lambda out, drafts: [wrong(t) for t in base[len(out):len(out) + len(drafts)]],
    "mix": lambda out, drafts: mixed(out, drafts),
}
rounds, mix_rounds = itertools.count(), []                             # the mix's rounds: 0, 1, 2, ...; their kinds


def mixed(out, drafts):
    """Round 0, 3, 6 ...: every draft right; 1, 4 ...: only the first (a rollback inside the block);
    2, 5 ...: none. Each round's kind ('all', 'one', 'none') is kept in mix_rounds."""
    right = base[len(out):len(out) + len(drafts)]                     # the plain run's next tokens
    keep = (len(right), 1, 0)[next(rounds) % 3]
    mix_rounds.append("all" if keep >= len(right) else "none" if keep == 0 else "one")
    return right[:keep] + [wrong(t) for t in right[keep:]]


KINDS = {"all": ("all right", "全对"), "one": ("only the first right", "只有第一个对"), "none": ("none right", "全错")}


def replay_label(name):
    """What a replay was, said after it ran: the mixed run is called a mix only if its rounds were of
    more than one kind (a short reply can end within its first round)."""
    if name == "all":
        return tr("all accepted (the plain run's tokens)", "全部接受（普通解码的词元）")
    if name == "none":
        return tr("all rejected (wrong tokens)", "全部拒绝（错误的词元）")
    kinds = [tr(*KINDS[k]) for k in mix_rounds]
    if len(set(mix_rounds)) > 1:
        return tr("a mix ({n} rounds of drafts, in turn: {k})", "混合（{n} 轮草稿，依次是：{k}）",
                  n=len(mix_rounds), k=tr(", ", "、").join(kinds))
    return tr("meant as a mix, but the reply ended after {n} round(s) of drafts, {k}: no mix",
              "本想混合，但回复在 {n} 轮草稿后就结束了，{k}：没有混合", n=len(mix_rounds),
              k=tr(", ", "、").join(kinds) or tr("none", "没有草稿"))
replay_stats = {}
for name, replay in replays.items():
    stats, cache = {}, model.new_cache()
    got = list(speculative_ids(model, prompt_tokens, K, max_new_tokens=n_replay, stop=stop, vocab=V, cache=cache,
                               stats=stats, guess=replaying(replay)))
    label = replay_label(name)
    replay_stats[name] = stats
    replay_per_pass, replay_is_greedy = (len(got) - 1) / max(stats["rounds"], 1), got == base[:len(got)]
    say("  {l}: {a} of {d} accepted, {r:.2f} tokens per forward pass; the plain greedy tokens: {same}",
        "  {l}：{d} 个中接受 {a} 个，每次前向计算 {r:.2f} 个词元；与普通贪心解码的词元相同：{same}",
        l=label, a=stats["accepted"], d=stats["drafted"], r=replay_per_pass, same=replay_is_greedy)
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
mix_happened = len(set(mix_rounds)) > 1
which_run = tr("mixed", "混合") if mix_happened else tr("last", "最后一次")
positions_held = (cache.length if cache.length == plain_cache.length == len(read)
                  else f"{cache.length} != {plain_cache.length}")
say("  after the {w} run: {n} positions in both caches; Gated DeltaNet states differ from plain decoding's by at most\n"
    "  {s:.1e}, conv windows by {c:.1e}, attention keys and values (cut back) by {kv:.1e}",
    "  {w}运行之后：两个缓存都是 {n} 个位置；Gated DeltaNet 状态与普通解码的最大差 {s:.1e}，\n"
    "  卷积窗口 {c:.1e}，注意力的键和值（截回之后）{kv:.1e}", w=which_run, n=positions_held,
    s=state_diff, c=conv_diff, kv=kv_diff)
say("  (replayed drafts: these counts show the mechanism, not how well any head guesses)",
    "  （重放的草稿：这些数字展示的是机制，不是哪个 MTP 头猜得多好）")

# %% [markdown]
# ## 5. A draft vocabulary cut to the frequent tokens / 只含常用词元的草稿词表
# The head shares the output layer: 248,320 rows, the largest matmul of a decode step, and each
# draft pays for it again. Letting the head guess only among the most frequent tokens (EAGLE-3
# does this) makes a draft far cheaper. The output stays exact, since the model still chooses every
# token among all of them; what the cut can cost is acceptance: a draft outside the cut cannot be
# guessed, so the share of a text's tokens inside it (its coverage) bounds what acceptance is kept.
# The frequencies are counted on the course's own prose (the markdown cells of the chapters
# before this one, through the real tokenizer), and the coverage is measured on this chapter's
# prose, which the counts never saw.
#
# MTP 头共用输出层：248,320 行，是解码一步里最大的矩阵乘法，而每个草稿都要再算一次。只让 MTP 头在最常用的
# 词元里猜（EAGLE-3 就这样做），草稿就便宜得多。输出仍然精确，因为每个词元仍由模型在全部词元里选出；
# 这样做可能损失的是接受率：草稿词表之外的词元猜不到，所以一段文本落在草稿词表里的比例（覆盖率）
# 就是能保住的接受率的上限。频率统计自课程自己的讲解文字（本章之前各章的 markdown 格，经过真实的分词器），
# 覆盖率则在本章的讲解文字上测量，统计时没有见过它。

# %%


def course_prose(script):
    """(English lines, Chinese lines) of a chapter script's markdown cells."""
    en, zh = [], []
    for cell in re.split(r"^# %% \[markdown\]$", script.read_text(encoding="utf-8"), flags=re.M)[1:]:
        for line in re.split(r"^# %%", cell, flags=re.M)[0].splitlines():
            text = line[1:].strip() if line.startswith("#") else ""
            if text and not text.startswith(("Run:", "#")):
                (zh if any("\u4e00" <= c <= "\u9fff" for c in text) else en).append(text)
    return " ".join(en), "".join(zh)


section(5, "The draft vocabulary: the course's prose through the tokenizer", "草稿词表：课程的讲解文字经过分词器")
root = Path(qwen.__file__).resolve().parents[1]                      # the chapters sit beside qwen/
scripts = sorted(p for p in root.glob("ch[0-9][0-9]_*.py") if int(p.name[2:4]) < 12)
counted = [tok.encode(text) for s in scripts for text in course_prose(s)]
own = [tok.encode(text) for text in course_prose(root / "ch12_mtp.py")] if (root / "ch12_mtp.py").is_file() else []
seen = len(frequent_tokens(counted, V))
n_counted, n_scripts = sum(map(len, counted)), len(scripts)
own_en, own_zh = (len(own[0]), len(own[1])) if own else (0, 0)
say("  counted: {t:,} tokens of prose in {n} chapters, {s:,} different ids; measured on: chapter 12's {e:,} English "
    "and {z:,} Chinese tokens",
    "  统计用：{n} 章讲解文字的 {t:,} 个词元，{s:,} 个不同的编号；测量用：第 12 章的 {e:,} 个英文词元和 {z:,} 个中文词元",
    t=n_counted, n=n_scripts, s=seen, e=own_en, z=own_zh)
sizes = [n for n in (256, 1024, 4096) if n < seen] + [seen]
cover = {n: [coverage(frequent_tokens(counted, n), ids) for ids in own] for n in sizes}
first = [coverage(range(seen), ids) for ids in own]                  # ids in BPE merge order, for comparison
rows = [(tr("draft vocabulary", "草稿词表"), tr("English", "英文"), tr("Chinese", "中文"))]
rows += [(tr("{n:,} most frequent ids", "最常用的 {n:,} 个编号", n=n), f"{cover[n][0]:.1%}", f"{cover[n][1]:.1%}")
         for n in sizes]
rows += [(tr("the first {n:,} ids (merge order)", "前 {n:,} 个编号（合并顺序）", n=seen), f"{first[0]:.1%}", f"{first[1]:.1%}")]
for name, a, b in rows:                                              # aligned by display width (CJK: 2 columns)
    row = "  " + pad(name, 36) + pad(a, 8, right=True) + pad(b, 10, right=True)
    print(row)
cut = DraftVocabulary(model, frequent_tokens(counted, seen))
cut_stats = {}
with_cut = list(speculative_ids(model, prompt_tokens, K, stats=cut_stats, guess=cut, **run))
n_cut, cut_share, cut_is_greedy = len(cut), len(cut) / cfg.vocab_size, with_cut == plain
say("  the head guessing among these {n:,} ids ({r:.1%} of the output layer's rows): the plain greedy reply: {same}",
    "  MTP 头只在这 {n:,} 个编号里猜（输出层行数的 {r:.1%}）：与普通贪心解码的回复相同：{same}",
    n=n_cut, r=cut_share, same=cut_is_greedy)
cut_acceptance = teacher_forced_acceptance(model, ids, V, cut)[0]
say("  teacher-forced acceptance on section 2's text: {a:.0%} with the cut vocabulary, {b:.0%} without",
    "  在第 2 节的文本上用教师强制测的接受率：用草稿词表 {a:.0%}，不用 {b:.0%}", a=cut_acceptance, b=library)

# %% [markdown]
# ## 6. Where the time goes / 时间花在哪里
# A decode step reads every weight once to produce one token; on a CPU that is mostly waiting for
# memory, so a forward pass of k + 1 tokens costs little more than one of a single token. A round
# costs k drafts and one verify pass, and yields on average (1 - a^(k+1)) / (1 - a) tokens when
# each draft is accepted with probability a (given the ones before it were). In units of a decode
# step: speedup(a) = ((1 - a^(k+1)) / (1 - a)) / (k x draft + verify). The costs below are measured
# in this chapter's runs; the speedups at a = 0.65 and 0.8 are projections from them, not
# measurements of a trained head. bench/bench_speculative.py measures the full-size model.
# That is also why chapter 9 and `python main.py chat` decode plainly unless given
# `--speculative K`: a round whose drafts are all rejected costs k drafts and a verify pass for a
# single token, slower than plain decoding. Turn it on where the head guesses well (it samples
# too: section 7).
#
# 解码一步要把每个权重读一遍，才得到一个词元；在 CPU 上，这主要是在等内存，所以一次前向计算读 k + 1 个词元，
# 只比读一个词元贵一点。一轮的代价是 k 次起草加一次验证；如果每个草稿（在前面的都被接受的条件下）被接受的
# 概率是 a，一轮平均得到 (1 - a^(k+1)) / (1 - a) 个词元。以解码一步为单位：
# speedup(a) = ((1 - a^(k+1)) / (1 - a)) / (k x draft + verify)。下面的代价是在本章的运行中测量的；
# a = 0.65 和 0.8 时的加速比是用这些代价算出的预计加速比，不是训练过的 MTP 头的测量结果。
# bench/bench_speculative.py 测量全尺寸模型。
# 这也是第 9 章和 `python main.py chat` 默认用普通解码、只有加上 `--speculative K` 才起草的原因：
# 草稿全被拒绝的一轮，要花 k 次起草加一次验证才得到一个词元，比普通解码慢。在 MTP 头猜得准的地方再打开它
# （它也能采样：第 7 节）。

# %%


def projected(a, k, draft, verify):
    """Tokens per round over the round's cost, in decode steps: the speedup at acceptance a."""
    tokens = k + 1 if a == 1 else (1 - a ** (k + 1)) / (1 - a)
    return tokens / (k * draft + verify)


section(6, "Where the time goes: a decode step, a draft, a verify pass", "时间花在哪里：解码一步、起草一次、验证一次")
step = plain_stats["decode_s"] / max(plain_stats["new_tokens"] - 1, 1)                # one plain decode step
draft = spec_stats["draft_s"] / max(spec_stats["drafted"], 1) / step                  # in decode steps
draft_cut = cut_stats["draft_s"] / max(cut_stats["drafted"], 1) / step
verify = spec_stats["verify_s"] / max(spec_stats["rounds"], 1) / step
step_ms, verified = step * 1e3, K + 1
say("  one plain decode step: {ms:.1f} ms", "  普通解码一步：{ms:.1f} 毫秒", ms=step_ms)
say("  one verify pass of {n} tokens = {v:.2f} decode steps", "  一次验证（{n} 个词元）= {v:.2f} 步解码", n=verified, v=verify)
say("  one draft = {d:.2f} decode steps with the whole output layer, {c:.2f} with the cut vocabulary of {n:,} ids",
    "  起草一次 = {d:.2f} 步解码（用整个输出层），{c:.2f} 步（用 {n:,} 个编号的草稿词表）", d=draft, c=draft_cut, n=n_cut)
rate = lambda s: max(s["new_tokens"] - 1, 1) / max(s["decode_s"], 1e-9)               # decode tokens/s
perfect = replay_stats[next(iter(replays))]
rates = {"plain": rate(plain_stats), "spec": rate(spec_stats), "cut": rate(cut_stats), "perfect": rate(perfect)}
speedups = {name: r / rates["plain"] for name, r in rates.items()}                   # against plain decoding
say("  decode: plain {p:.1f} tokens/s; speculative, the head's own drafts {s:.1f} ({sr:.2f}x), with the cut "
    "vocabulary {c:.1f} ({cr:.2f}x); replayed drafts, all accepted {r:.1f} ({rr:.2f}x)",
    "  解码：普通 {p:.1f} 词元/秒；推测解码，MTP 头自己的草稿 {s:.1f}（{sr:.2f} 倍），用草稿词表 {c:.1f}（{cr:.2f} 倍）；"
    "重放的草稿、全部接受 {r:.1f}（{rr:.2f} 倍）",
    p=rates["plain"], s=rates["spec"], sr=speedups["spec"], c=rates["cut"], cr=speedups["cut"], r=rates["perfect"],
    rr=speedups["perfect"])
say("  projected, speedup(a) = ((1 - a^(k+1)) / (1 - a)) / (k x draft + verify) with k = {k}, verify = {v:.2f}:",
    "  预计加速比 speedup(a) = ((1 - a^(k+1)) / (1 - a)) / (k x draft + verify)，k = {k}，verify = {v:.2f}：",
    k=K, v=verify)
for d, name in ((draft, tr("whole output layer", "整个输出层")), (draft_cut, tr("cut vocabulary", "草稿词表"))):
    at_65, at_80, at_1 = (projected(a, K, d, verify) for a in (0.65, 0.8, 1))
    say("    {n}, draft = {d:.2f}: a = 0.65: {a:.2f}x; a = 0.8: {b:.2f}x; a = 1 (every draft right): {c:.2f}x",
        "    {n}，draft = {d:.2f}：a = 0.65：{a:.2f} 倍；a = 0.8：{b:.2f} 倍；a = 1（草稿全对）：{c:.2f} 倍",
        n=name, d=d, a=at_65, b=at_80, c=at_1)
say("  (a = 1 against the replayed drafts, all accepted, with the whole output layer: measured {r:.2f}x)",
    "  （a = 1 与重放的草稿、全部接受、用整个输出层的实测对比：{r:.2f} 倍）", r=speedups["perfect"])
say("  with this head's own drafts, decoding ran at {r:.2f}x plain decoding here: chapter 9 and the chat decode "
    "plainly unless given --speculative K",
    "  用这个 MTP 头自己的草稿，这里的解码速度是普通解码的 {r:.2f} 倍：第 9 章和对话默认用普通解码，"
    "加上 --speculative K 才用推测解码", r=speedups["spec"])
note(ch.threads)
if ch.tiny:
    say("  (tiny sizes: hidden {h}, and a 248,320-row output layer that is most of every step; these ratios say\n"
        "  little about Qwen3.5-0.8B, and a = 0.65 / 0.8 are third-party figures for the trained head, not this one)",
        "  （小检查点的大小：隐藏维度为 {h}，而 248,320 行的输出层占了每一步的大部分；这些比值说明不了\n"
        "  Qwen3.5-0.8B 的情况；a = 0.65、0.8 是第三方给训练过的 MTP 头的数字，不是这个 MTP 头的）", h=cfg.hidden_size)

if args.plot and (plt := ch.pyplot()) is not None:
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4))
    grid = sorted({*range(64, seen, max(seen // 24, 1)), seen})
    for ids, name in zip(own, (ch.label("English", "英文"), ch.label("Chinese", "中文"))):
        ax1.plot(grid, [coverage(frequent_tokens(counted, n), ids) for n in grid], label=name)
    ax1.set_xlabel(ch.label("draft vocabulary: most frequent ids", "草稿词表：最常用的编号数"))
    ax1.set_ylabel(ch.label("coverage of chapter 12's prose", "第 12 章讲解文字的覆盖率"))
    ax1.legend()
    a = torch.linspace(0, 1, 41).tolist()                          # the costs were measured at k = K only
    for d, name in ((draft, ch.label("whole output layer", "整个输出层")), (draft_cut, ch.label("cut vocabulary", "草稿词表"))):
        ax2.plot(a, [projected(x, K, d, verify) for x in a], label=name)
    ax2.scatter([1], [speedups["perfect"]], color="black", zorder=3,
                label=ch.label("replayed drafts, all accepted (measured)", "重放的草稿，全部接受（实测）"))
    ax2.axhline(1, color="grey", lw=0.5)
    ax2.set_xlabel(ch.label("acceptance a", "接受率 a"))
    ax2.set_ylabel(ch.label("projected speedup at k = {k} (measured costs)", "k = {k} 时的预计加速比（用测量的代价）", k=K))
    ax2.legend()
    fig.suptitle(ch.label("Speculative decoding", "推测解码")
                 + (ch.label(" (tiny checkpoint: made-up weights, tiny sizes)", "（小检查点：权重是编造的，尺寸很小）")
                    if ch.tiny else ""))
    ch.save(fig, "ch12_speculative.png")

# %% [markdown]
# ## 7. Sampling: the accept / reject rule / 采样：接受 / 拒绝规则
# With a temperature (and top-k, top-p), the head draws each draft d from its own distribution q,
# with the same settings, and the model gives its distribution p at the same place. Keep d with
# probability min(1, p(d) / q(d)); at the first draft not kept, draw the next token from
# norm(max(0, p - q)), what p wants more of than q offered; all kept, draw one more from the
# model's p after the last draft (Leviathan et al. 2023; Chen et al. 2023). Kept with
# probability min(p, q) and replaced by the rest of p, every token comes out distributed exactly
# as plain sampling's, whatever q is: `qwen/mtp.py` `accept_sampled`. The check below runs it
# on a made-up p and q over 6 tokens, far apart on purpose.
#
# 有温度（以及 top-k、top-p）时，MTP 头用同样的设置从自己的分布 q 里抽出每个草稿 d，模型在同一位置给出
# 它的分布 p。以 min(1, p(d) / q(d)) 的概率保留 d；遇到第一个没保留的草稿，就从 norm(max(0, p - q))
# 里抽下一个词元，也就是 p 比 q 多要的那部分；全部保留时，再从模型在最后一个草稿之后的 p 里多抽一个
# （Leviathan 等，2023；Chen 等，2023）。以 min(p, q) 的概率保留、其余用 p 剩下的部分补上，每个词元的分布
# 就和普通采样完全相同，不管 q 是什么：`qwen/mtp.py` 的 `accept_sampled`。下面在 6 个词元上编造的、
# 故意相差很远的 p 和 q 上检验它。

# %%
section(7, "Sampling: the accept / reject rule keeps the model's distribution", "采样：接受 / 拒绝规则保持模型的分布")
p_made = torch.tensor([0.50, 0.25, 0.15, 0.07, 0.03, 0.00], dtype=torch.float64)      # made up: the model's p
q_made = torch.tensor([0.05, 0.05, 0.10, 0.20, 0.30, 0.30], dtype=torch.float64)      # made up: the head's q
rounds, g = 2000, torch.Generator().manual_seed(0)
first = torch.zeros(6, dtype=torch.float64)                                           # the round's first token
for d in torch.multinomial(q_made, rounds, replacement=True, generator=g).tolist():   # one draft per round
    a, nxt = accept_sampled([d], q_made[None], torch.stack([p_made, p_made]), g)     # q (1, 6), p (2, 6)
    first[d if a else nxt] += 1                                                       # kept: d; else the draw
tv = 0.5 * float((first / rounds - p_made).abs().sum())                               # total variation
straight = torch.multinomial(p_made, 1000 * rounds, replacement=True,                 # chance alone: 1,000 samples
                             generator=torch.Generator().manual_seed(1)).reshape(1000, rounds)   # drawn from p itself
counts = torch.zeros(1000, 6, dtype=torch.float64).scatter_add_(1, straight, torch.ones(1000, rounds, dtype=torch.float64))
chance = 0.5 * (counts / rounds - p_made).abs().sum(-1)                               # (1000,) their distances to p
band = float(chance.quantile(0.95))                                                   # 95 of 100 stay below
tv_kept = 0.5 * float((q_made - p_made).abs().sum())                                  # keeping every draft: q itself
verdict = tr("within chance" if tv < band else "MORE than chance gives",
             "在偶然范围之内" if tv < band else "超出了偶然能给的范围")
say("  made-up p and q over 6 tokens, {n:,} rounds: the first token's frequencies differ from p by {tv:.3f} "
    "(total variation); {n:,} tokens drawn straight from p differ by less than {b:.3f} in 95% of 1,000 tries: "
    "{verdict}",
    "  6 个词元上编造的 p 和 q，{n:,} 轮：第一个词元的频率与 p 相差 {tv:.3f}（总变差距离）；直接从 p 抽 {n:,} 个词元，"
    "1,000 次里有 95% 相差小于 {b:.3f}：{verdict}",
    n=rounds, tv=tv, b=band, verdict=verdict)
say("  keeping every draft instead would give q's frequencies, {b:.3f} away from p",
    "  如果保留所有草稿，得到的是 q 的频率，与 p 相差 {b:.3f}", b=tv_kept)
say("  the same rule runs in speculative_ids(..., temperature=0.7): python main.py chat --speculative 3",
    "  speculative_ids(..., temperature=0.7) 里用的就是这条规则：python main.py chat --speculative 3")

# %% [markdown]
# ## How to explain it / 怎么讲给别人听
# The MTP head is a small extra layer that, given what the model just thought and the token it just
# chose, guesses the token after. Let it guess a few tokens ahead, then give the model all of them
# at once: reading k + 1 tokens costs about as much as reading one, because the time goes into
# fetching the weights. The model keeps the guesses it agrees with, up to the first one it would
# not have chosen, and adds its own token there. Nothing it would not have written gets through, so
# the greedy reply is unchanged; a good head just gets several tokens out of one pass. After a
# wrong guess the caches are put back: attention caches are cut, and the Gated DeltaNet layers,
# whose state cannot be cut, get back the copy they kept after each token.
#
# MTP 头是一个小小的额外层：知道模型刚才的想法和它刚选的词元，就猜下一个之后的词元。让它往前猜几个，再把
# 它们一次交给模型：读 k + 1 个词元和读一个差不多贵，因为时间都花在取权重上。模型接受它同意的猜测，直到
# 第一个它自己不会选的为止，并在那里换上自己的词元。模型不会写的东西一个也过不去，所以贪心回复不变；好的
# MTP 头只是让一次前向计算得到好几个词元。猜错之后要恢复缓存：注意力缓存截短即可，Gated DeltaNet 层的状态
# 截不短，就放回它在每个词元之后保留的那一份。
#
# ## Summary / 小结
# - Head: fc(cat[norm(embed(x_{t+1})), norm(h_t)]), embedding first, h_t after the final norm; one
#   full-attention layer with its own cache; mtp.norm; the shared output layer: a guess for x_{t+2}.
# - Round: k drafts, one verify pass of k + 1 tokens, accept up to the first disagreement, plus the
#   model's own next token: the output is plain greedy decoding's, token for token (in fp32).
# - Sampling: keep a draft with probability min(1, p/q), else draw from norm(max(0, p - q)): the
#   output keeps plain sampling's distribution.
# - Rollback: KV caches cut; Gated DeltaNet conv windows and states kept per token, put back.
# - Speed: speedup(a) = ((1 - a^(k+1)) / (1 - a)) / (k x draft + verify); a cut draft vocabulary
#   makes drafts cheap, at most its coverage of acceptance is kept.
#
# - MTP 头：fc(cat[norm(embed(x_{t+1})), norm(h_t)])，嵌入在前，h_t 取最终归一化之后的；一个有自己缓存的
#   全注意力层；mtp.norm；共享的输出层：对 x_{t+2} 的猜测。
# - 一轮：起草 k 个，一次验证 k + 1 个词元，接受到第一个不一致为止，再加上模型自己的下一个词元：
#   输出与普通贪心解码逐词元相同（fp32 下）。
# - 采样：以 min(1, p/q) 的概率保留草稿，否则从 norm(max(0, p - q)) 里抽：输出保持普通采样的分布。
# - 回滚：键值缓存截短；Gated DeltaNet 的卷积窗口和状态按词元保留，再放回去。
# - 速度：speedup(a) = ((1 - a^(k+1)) / (1 - a)) / (k x draft + verify)；草稿词表让起草变便宜，
#   接受率最多保住它的覆盖率那么多。

# %%
say("\nExercise for this chapter: 250 (the accept rule). Try it: python practice/judge.py 250\n"
    "Speculative decoding elsewhere: python main.py 9 --speculative 3, python main.py chat --speculative 3",
    "\n本章练习：250（接受规则）。试一试：python practice/judge.py 250\n"
    "在别处用推测解码：python main.py 9 --speculative 3、python main.py chat --speculative 3")
