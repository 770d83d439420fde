# %% [markdown]
# # Chapter 14 · The loss, the gradient, the update / 第 14 章 · 损失、梯度与更新
#
# Training starts from one number: the next-token cross-entropy (`qwen/train.py`). Its gradient
# reaches every weight through autograd; RMSNorm's and the MLP's backward are also written by hand
# and checked; AdamW turns gradients into an update; clipping and a schedule keep it tame.
#
# 训练从一个数开始：下一个词元的交叉熵（`qwen/train.py`）。它的梯度经自动求导传到每个权重；
# RMSNorm 和 MLP 的反向传播也手写一遍并核对；AdamW 把梯度变成更新；裁剪和学习率调度让更新平稳。
#
# Run: `python ch14_loss.py [--model PATH] [--tiny] [--lang zh] [--plot] [--mine]`

# %%
import math

import torch

import qwen.train
from engine.cli import chapter, say, section, show_code
from practice.mine import training_step
from qwen.model import load_model
from qwen.norm import RMSNorm
from qwen.train import AdamW, clip_grad_norm, decay_groups, lr_at, next_token_loss, rms_norm

ch = chapter("Chapter 14: the loss, the gradient, the update", "第 14 章：损失、梯度与更新", plot=True, mine=True)
torch.set_grad_enabled(True)        # training needs autograd, even where an earlier cell turned it off
torch.manual_seed(0)
TEXT = ("The model reads a token, predicts the next one, and learns from its mistake. "
        "模型读一个词元，预测下一个，并从错误中学习。") * 2

# %% [markdown]
# ## The code / 代码

# %%
taught = show_code(ch, qwen.train)

# %% [markdown]
# ## 1. The loss on a batch / 一个批次上的损失
# At random init every token is about equally likely, so the loss starts near ln(V).
#
# 随机初始化时每个词元的概率差不多，所以损失从 ln(V) 附近开始。

# %%
section(1, "The next-token loss", "下一个词元的损失")
model = load_model(ch.path, vision=False)
ids = torch.tensor([ch.sentence(TEXT)[0]])                  # (1, seq)
labels = ids.clone()
labels[:, :4] = -100                                        # a "prompt": not counted
counted = int((labels[:, 1:] != -100).sum())
with torch.no_grad():
    loss0 = next_token_loss(model(ids), labels).item()
ln_v = math.log(ch.cfg.vocab_size)
say("  {n} tokens, {c} counted; loss = {l:.4f}; ln(V) = ln({v}) = {r:.4f}",
    "  {n} 个词元，计入 {c} 个；损失 = {l:.4f}；ln(V) = ln({v}) = {r:.4f}",
    n=ids.shape[1], c=counted, l=loss0, v=ch.cfg.vocab_size, r=ln_v)
if ch.tiny:
    say("  (tiny checkpoint: random weights, so the loss sits near ln(V): a claim this number checks)",
        "  （小检查点：权重是随机的，所以损失接近 ln(V)：这个数检验的就是这一点）")

# %% [markdown]
# ## 2. RMSNorm's backward by hand / 手写 RMSNorm 的反向传播

# %%
section(2, "The hand-written backward against autograd", "手写反向传播与自动求导对比")
g = torch.Generator().manual_seed(1)
x64 = torch.randn(2, 3, 8, dtype=torch.float64, generator=g, requires_grad=True)
w64 = (0.3 * torch.randn(8, dtype=torch.float64, generator=g)).requires_grad_(True)
passed = torch.autograd.gradcheck(rms_norm, (x64, w64), eps=1e-6, atol=1e-6)
say("  gradcheck in float64: {p}", "  float64 下的 gradcheck：{p}", p=passed)
norm = RMSNorm(ch.cfg.hidden_size).requires_grad_(True)
x = torch.randn(4, ch.cfg.hidden_size, generator=g, requires_grad=True)
norm(x).pow(2).sum().backward()
x2 = x.detach().clone().requires_grad_(True)
rms_norm(x2, norm.weight.detach(), norm.eps).pow(2).sum().backward()
gap = (x2.grad - x.grad).abs().max().item()
say("  largest difference from autograd's dx: {d:.2e}", "  与自动求导的 dx 的最大差：{d:.2e}", d=gap)

# %% [markdown]
# ## 3. AdamW against torch's / AdamW 与 torch 的对比

# %%
section(3, "AdamW by hand against torch.optim.AdamW", "手写 AdamW 与 torch.optim.AdamW 对比")
a, b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
b.load_state_dict(a.state_dict())
mine_opt = AdamW(a.parameters(), lr=1e-2, weight_decay=0.1)
torch_opt = torch.optim.AdamW(b.parameters(), lr=1e-2, weight_decay=0.1, foreach=False)
for step in range(5):
    batch = torch.randn(4, 8, generator=g)
    for m, opt in ((a, mine_opt), (b, torch_opt)):
        opt.zero_grad()
        m(batch).pow(2).mean().backward()
        opt.step()
adam_gap = max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))
say("  after 5 steps the largest difference in any weight: {d:.2e}", "  5 步之后任一权重的最大差：{d:.2e}", d=adam_gap)

# %% [markdown]
# ## 4. A few steps of training / 训练几步

# %%
section(4, "The loss falls", "损失下降")
model.requires_grad_(True)
STEPS, PEAK = 8, 3e-3
opt = AdamW(decay_groups(model, 0.1), lr=PEAK)
losses = []
for step in range(STEPS):
    for group in opt.param_groups:
        group["lr"] = lr_at(step, PEAK, 2, STEPS, PEAK / 10)
    opt.zero_grad(set_to_none=True)
    loss = next_token_loss(model(ids), labels)
    loss.backward()
    grad_norm = clip_grad_norm(list(model.parameters()), 1.0)   # keeps one step from going far
    opt.step()
    losses.append(loss.item())
first_loss, last_loss = losses[0], losses[-1]
say("  loss at step 0: {a:.4f}; after {n} steps: {b:.4f}", "  第 0 步损失：{a:.4f}；{n} 步之后：{b:.4f}",
    a=first_loss, n=STEPS, b=last_loss)
if ch.tiny:
    say("  (tiny checkpoint: random weights, one short text learnt by heart: only the fall means something)",
        "  （小检查点：权重是随机的，只是背下一小段文字：只有下降本身有意义）")
yours = training_step(model, ids, labels) if ch.args.mine else None   # --mine: your 270 and 271 in one backward pass

# %% [markdown]
# ## 5. The schedule / 学习率调度

# %%
section(5, "Warm-up, then a cosine", "先预热，再按余弦下降")
schedule = [lr_at(s, 1e-3, 10, 100, 1e-4) for s in range(110)]
say("  step 0: {a:.1e}; step 9: {b:.1e}; step 55: {c:.2e}; step 100: {d:.1e}",
    "  第 0 步：{a:.1e}；第 9 步：{b:.1e}；第 55 步：{c:.2e}；第 100 步：{d:.1e}",
    a=schedule[0], b=schedule[9], c=schedule[55], d=schedule[100])
if getattr(ch.args, "plot", False) and (plt := ch.pyplot()):
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.plot(schedule)
    ax.set_xlabel(ch.label("step", "步"))
    ax.set_ylabel(ch.label("learning rate", "学习率"))
    ch.save(fig, "ch14_schedule.png")

# %% [markdown]
# ## 6. Memory per step / 每一步的内存
# Weights, gradients and Adam's two moments: 4 numbers per parameter, 16 bytes in fp32. The
# activations autograd keeps grow with the sequence; activation checkpointing keeps only each
# layer's input and recomputes the rest during backward.
#
# 权重、梯度和 Adam 的两个矩：每个参数 4 个数，fp32 下 16 字节。自动求导保存的激活随序列变长；
# 激活检查点只保存每层的输入，反向时重新计算其余部分。

# %%
section(6, "What a training step keeps", "一个训练步保存了什么")
trained = [p for p in model.parameters() if p.grad is not None]   # the MTP head is not in this loss
params = sum(p.numel() for p in trained)
kept = sum(p.nbytes + p.grad.nbytes for p in trained)
kept += sum(t.nbytes for s in opt.state.values() for t in s.values() if torch.is_tensor(t))
formula = 16 * params
say("  {p} parameters: weights + gradients + 2 moments = {k} bytes; formula 16 x P = {f}",
    "  {p} 个参数：权重 + 梯度 + 2 个矩 = {k} 字节；公式 16 x P = {f}", p=params, k=kept, f=formula)


def saved_bytes(seq, checkpoint=False):
    """Bytes of the tensors autograd saves for backward in one forward of `seq` tokens, the
    weights left out (they are kept anyway), each storage counted once (and held until counted, so
    that a freed one's address, reused, is not taken for it)."""
    seen = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            seen[storage.data_ptr()] = storage
        return t
    run_ids = torch.arange(seq)[None] % ch.cfg.vocab_size
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        x = model.embed_tokens(run_ids)
        cos, sin = model.rotary(torch.arange(seq))
        for layer in model.layers:
            if checkpoint:
                x = torch.utils.checkpoint.checkpoint(layer, x, cos, sin, use_reentrant=False)
            else:
                x = layer(x, cos, sin)
        next_token_loss(model.logits(model.norm(x)), run_ids)
    return sum(storage.nbytes() for storage in seen.values())


weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
activations = {seq: saved_bytes(seq) for seq in (16, 32, 64)}
checkpointed = {seq: saved_bytes(seq, checkpoint=True) for seq in (16, 32, 64)}
for seq in activations:
    plain_kb, ckpt_kb = activations[seq] / 1024, checkpointed[seq] / 1024
    scores_kb = (seq - 1) * ch.cfg.vocab_size * 4 / 1024            # the fp32 log-softmax: seq - 1 predictions
    say("  {s} tokens: activations kept {a:.0f} KiB; with checkpointing {c:.0f} KiB; of which the scores, (seq - 1) x V x 4 bytes: {o:.0f} KiB",
        "  {s} 个词元：保存的激活 {a:.0f} KiB；用激活检查点时 {c:.0f} KiB；其中输出分数（seq - 1）x V x 4 字节：{o:.0f} KiB",
        s=seq, a=plain_kb, c=ckpt_kb, o=scores_kb)
if ch.tiny:
    say("  (these are the tiny model's sizes, not Qwen3.5-0.8B's)", "  （这些是小模型的大小，不是 Qwen3.5-0.8B 的）")

# %% [markdown]
# ## How to explain it / 怎么讲给别人听
# The model predicts every next token at once; the loss is how surprised it was by the real one,
# -log p, averaged over the tokens that count. Backward runs the forward's steps in reverse and
# hands each weight its share of the blame: RMSNorm's gradient, written out here, is the
# formula autograd uses. AdamW turns the gradient into a step of about the learning rate's size
# for every weight, whatever its scale; clipping and the schedule keep the first steps and a bad
# batch from throwing the weights far.
#
# 模型一次预测每个位置的下一个词元；损失就是它对真实词元有多意外，即 -log p，在计入的词元上取平均。
# 反向传播把前向的步骤倒着走一遍，把"责任"分给每个权重：这里手写的 RMSNorm 梯度就是 autograd 用的公式。
# AdamW 把梯度变成每个权重上大约一个学习率大小的一步，不管权重本身多大；梯度裁剪和学习率调度
# 让最初几步和一个坏批次不会把权重推得太远。
#
# ## Summary / 小结
# - loss = mean over counted positions of -log softmax(logits[t])[label[t + 1]], in fp32; -100 is not counted.
# - RMSNorm's backward by hand equals autograd's (gradcheck in fp64; SwiGLU's too, in tests/test_train.py).
# - AdamW: two running moments, bias correction, decay only on matrices; equal to torch.optim.AdamW.
# - Activations, not weights, grow with the sequence; checkpointing trades them for a second forward.
#
# - 损失 = 在计入的位置上对 -log softmax(logits[t])[label[t + 1]] 取平均，用 fp32；-100 不计入。
# - 手写的 RMSNorm 反向传播与 autograd 的相等（fp64 下的 gradcheck；SwiGLU 的也是，见 tests/test_train.py）。
# - AdamW：两个滑动矩、偏差校正、只对矩阵做权重衰减；与 torch.optim.AdamW 相等。
# - 随序列长度增长的是激活而不是权重；激活检查点用多算一遍前向换回这部分内存。

# %%
say("\nExercises for this chapter: 270 (the loss), 271 (RMSNorm's backward), 272 (one AdamW step). "
    "Try one: python practice/judge.py 270",
    "\n本章练习：270（损失）、271（RMSNorm 的反向传播）、272（AdamW 的一步）。试一个：python practice/judge.py 270")
