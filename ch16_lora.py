# %% [markdown]
# # Chapter 16 · LoRA on the real model / 第 16 章 · 在真实模型上做 LoRA
#
# Chapter 15 trained every weight of a small model. Fine-tuning 0.8 billion weights that way needs
# their gradients and AdamW's two moments: 16 bytes a weight, 13 GB. LoRA (`qwen/lora.py`) freezes
# them all and trains a small low-rank update beside each big projection, (alpha / r) B A; the
# adapters are a few million numbers, saved in PEFT's format, and merged into the weights at the end.
#
# 第 15 章训练的是小模型的每一个权重。用同样的办法微调 8 亿个权重，需要它们的梯度和 AdamW 的两个矩：
# 每个权重 16 字节，共 13 GB。LoRA（`qwen/lora.py`）把它们全部冻结，只在每个大投影旁边训练一个小的
# 低秩更新 (alpha / r) B A；适配器只有几百万个数，以 PEFT 的格式保存，最后合并进权重。
#
# Run: `python ch16_lora.py [--model PATH] [--tiny] [--steps N] [--lr LR] [--run DIR] [--lang zh]`

# %%
from pathlib import Path

import torch

import qwen.lora
from engine.cli import chapter, pad, say, section, show_code, tr
from engine.instructions import INSTRUCTIONS, copy_tokenizer, pad_batch, read_pairs, reply_loss
from engine.training import export
from qwen.config import Config
from qwen.files import folder_to_write
from qwen.generate import generate, stop_ids
from qwen.lang import QwenError
from qwen.lora import adapters, add_lora, load_adapter, merge, save_adapter, trainable
from qwen.model import Qwen35, load_model
from qwen.pretrain import init_weights, small_config
from qwen.train import AdamW, clip_grad_norm, decay_groups, lr_at, next_token_loss

ch = chapter("Chapter 16: LoRA on the real model", "第 16 章：在真实模型上做 LoRA", options={
    "--steps": dict(type=int, default=16, help=("fine-tuning steps (each: 6 instruction pairs)",
                                                "微调步数（每步 6 对指令）")),
    "--lr": dict(type=float, default=1e-3, help=("the adapters' peak learning rate", "适配器的峰值学习率")),
    "--run": dict(default="out/ch16-lora", metavar="DIR", help=("where the adapter and the merged model are "
                                                                "written", "适配器和合并后的模型写到哪里")),
})
torch.set_grad_enabled(True)        # training needs autograd, even where an earlier cell turned it off
torch.manual_seed(0)                # the adapters' A: the same draw on every run
STEPS, PEAK, BATCH, RANK, ALPHA = ch.args.steps, ch.args.lr, 6, 8, 16
if STEPS < 1 or not 0 < PEAK < 1:
    raise QwenError("--steps must be at least 1 and --lr between 0 and 1, not {s} and {lr}.",
                    "--steps 至少为 1，--lr 必须在 0 和 1 之间，而不是 {s} 和 {lr}。", s=STEPS, lr=PEAK)
# checked now, not after the training: --run and its two folders can be written into
for sub, names in (("adapter", (qwen.lora.CONFIG, qwen.lora.WEIGHTS)),
                   ("merged", ("config.json", "model.safetensors"))):
    folder_to_write(Path(ch.args.run) / sub, names, origin="--run")

# %% [markdown]
# ## The code / 代码

# %%
taught = show_code(ch, qwen.lora)

# %% [markdown]
# ## 1. The instructions / 指令数据
# 36 short questions about this course with their answers, half in English, half in Chinese, each
# answer in the same form ("In one line: ..."), a habit the base model does not have. Each pair is
# written through the checkpoint's chat template, as a conversation; the label of every prompt
# token is -100, so the loss counts the reply's tokens only (and its `<|im_end|>`: the model learns
# to stop). Every sixth question, in both languages, is held out.
#
# 36 个关于本课程的简短问题和答案，一半英文，一半中文，每个答案都是同一种写法（“一句话：……”），
# 这是原来的模型没有的习惯。每一对都用检查点的对话模板写成一段对话；提示词的每个词元的标签都是 -100，
# 所以损失只计算回复的词元（以及它的 `<|im_end|>`：模型学会停下）。每六个问题留出一个（两种语言都留出）。

# %%
section(1, "The instructions", "指令数据")
tok, template = ch.needs_chat()                                    # without both the chapter stops here
pairs = read_pairs(INSTRUCTIONS)


def encode(pair):
    """(ids, labels) of one pair: the prompt's labels -100, the reply's its own ids."""
    user = [{"role": "user", "content": pair["prompt"]}]
    prompt = template.render(user, add_generation_prompt=True, enable_thinking=False)
    whole = template.render(user + [{"role": "assistant", "content": pair["reply"]}], add_generation_prompt=False)
    if not whole.startswith(prompt):
        raise QwenError("{f}: the chat template does not write a reply after its generation prompt.",
                        "{f}：对话模板没有把回复写在生成提示词之后。", f=template.origin)
    asked, answered = tok.encode(prompt), tok.encode(whole[len(prompt):])
    return asked + answered, [-100] * len(asked) + answered


held = [(i // 2) % 6 == 5 for i in range(len(pairs))]             # a question and its translation together
encoded = [encode(p) for p in pairs]
train_items = [e for e, h in zip(encoded, held) if not h]
held_items = [e for e, h in zip(encoded, held) if h]
pad_id = min(stop_ids(tok))
train_batches = [pad_batch(train_items[i:i + BATCH], pad_id) for i in range(0, len(train_items), BATCH)]
held_batch = pad_batch(held_items, pad_id)
counted = sum(sum(1 for t in labels if t != -100) for _, labels in train_items)
all_tokens = sum(len(ids) for ids, _ in train_items)
n_pairs, n_training, n_held = len(pairs), len(train_items), len(held_items)
say("  {n} pairs from {f}: {t} for training, {h} held out", "  {f} 里的 {n} 对：{t} 对用于训练，{h} 对留出",
    n=n_pairs, f=INSTRUCTIONS.name, t=n_training, h=n_held)
say("  training tokens: {a}, of which {c} are the replies' (counted in the loss) and the rest prompts (-100)",
    "  训练词元：{a} 个，其中 {c} 个属于回复（计入损失），其余是提示词（-100）", a=all_tokens, c=counted)
first_text = tok.decode(train_items[0][0])
say("  the first pair as the model reads it: {s!r}", "  模型读到的第一对：{s!r}", s=first_text)

# %% [markdown]
# ## 2. Adapters on the model / 给模型装上适配器
# `add_lora` wraps every projection DEFAULT_TARGETS names in a LoRALinear of rank 8 (alpha 16, scale
# 2) and freezes everything else. B starts at 0: the first forward pass must give the base model's
# logits exactly, not nearly.
#
# `add_lora` 把 DEFAULT_TARGETS 列出的每个投影包进秩为 8 的 LoRALinear（alpha 16，缩放 2），其余一切冻结。
# B 从 0 开始：第一次前向计算给出的 logits 必须与原模型完全相同，而不只是接近。

# %%
section(2, "Adapters on the model", "给模型装上适配器")
model = load_model(ch.path, vision=False)
probe = train_batches[0][0]                                          # (batch, seq)
with torch.no_grad():
    base_logits = model(probe)
    step0_gap = (add_lora(model, r=RANK, alpha=ALPHA)(probe) - base_logits).abs().max().item()
n_train, n_total = trainable(model)
share = 100 * n_train / n_total
wrapped = adapters(model)
n_wrapped = len(wrapped)
say("  {k} projections wrapped, rank {r}, alpha {a}: {t:,} trainable parameters of {n:,} ({p:.2f} %)",
    "  包装了 {k} 个投影，秩 {r}，alpha {a}：{n:,} 个参数中有 {t:,} 个可训练（{p:.2f} %）",
    k=n_wrapped, r=RANK, a=ALPHA, t=n_train, n=n_total, p=share)
say("  step 0 against the base model: max |logit difference| = {d}", "  第 0 步与原模型相比：logits 的最大差 = {d}",
    d=step0_gap)
linear_layer = next(layer for layer in model.layers if hasattr(layer, "linear_attn")).linear_attn
left_out = list(linear_layer.in_proj_a.weight.shape)
say("  left out: the DeltaNet's in_proj_a and in_proj_b, each {s} (out, in): rank {r} is not low there",
    "  没有包装：DeltaNet 的 in_proj_a 和 in_proj_b，形状都是 {s}（输出、输入）：秩 {r} 在这里并不低",
    s=left_out, r=RANK)

# %% [markdown]
# ## 3. Fine-tuning / 微调
# The loop of chapter 14 over the adapters only: AdamW keeps moments for them, not for the base. The
# output layer, 248,320 scores a position, is most of a step's work here: it runs only at the positions
# whose label counts, and the loss is the same number next_token_loss gives over every position.
#
# 第 14 章的循环，只作用在适配器上：AdamW 只为它们保存矩，不为原模型的权重保存。输出层每个位置要算
# 248,320 个分数，是这里每一步的大部分工作：它只在标签计入的位置上运行，得到的损失与 next_token_loss
# 在所有位置上算出的相同。

# %%
section(3, "Fine-tuning", "微调")


@torch.no_grad()
def loss_on(net, batches):
    return sum(reply_loss(net, b).item() for b in batches) / len(batches)


def fine_tune(net, steps):
    """`steps` updates of the trainable parameters over the training batches, in order. Returns the optimizer."""
    opt = AdamW(decay_groups(net, 0.0), lr=PEAK)
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, PEAK, max(1, steps // 10), steps, PEAK / 10)
        opt.zero_grad(set_to_none=True)
        reply_loss(net, train_batches[step % len(train_batches)]).backward()
        clip_grad_norm([p for p in net.parameters() if p.requires_grad], 1.0)
        opt.step()
    return opt


def reply(net, prompt):
    net.eval()
    text = "".join(generate(net, tok, prompt, template=template, max_new_tokens=32))
    net.train()
    return text


with torch.no_grad():
    everywhere = next_token_loss(model(probe), train_batches[0][1]).item()
    where_counted = reply_loss(model, train_batches[0]).item()
positions = sum(b[0].numel() for b in train_batches)
say("  the output layer at {c} of the batches' {p} positions; its loss {a:.6f}, next_token_loss over all {b:.6f}",
    "  输出层只算批次 {p} 个位置中的 {c} 个；损失 {a:.6f}，next_token_loss 在所有位置上 {b:.6f}",
    c=counted, p=positions, a=where_counted, b=everywhere)
sample_prompt = pairs[held.index(True)]["prompt"]                    # a held-out question
before_reply = None if ch.tiny else reply(model, sample_prompt)
train_before = loss_on(model, train_batches)
held_before = loss_on(model, [held_batch])
opt = fine_tune(model, STEPS)
train_after = loss_on(model, train_batches)
held_after = loss_on(model, [held_batch])
moments = sum(t.nbytes for s in opt.state.values() for t in s.values() if torch.is_tensor(t))
full_moments = 8 * n_total                                           # two fp32 moments for every weight
say("  {s} steps at lr {lr:.0e}: training loss {a:.3f} -> {b:.3f}; held-out {c:.3f} -> {d:.3f}",
    "  {s} 步，学习率 {lr:.0e}：训练损失 {a:.3f} -> {b:.3f}；留出损失 {c:.3f} -> {d:.3f}",
    s=STEPS, lr=PEAK, a=train_before, b=train_after, c=held_before, d=held_after)
say("  AdamW's moments: {m:,} bytes (for every weight they would be {f:,})", "  AdamW 的矩：{m:,} 字节（若为每个权重保存则是 {f:,}）",
    m=moments, f=full_moments)
if ch.tiny:
    say("  (tiny checkpoint: random weights; the loss still falls, and nothing else here means anything)",
        "  （小检查点：权重是随机的；损失照样下降，除此之外这里的数都没有意义）")
else:
    after_reply = reply(model, sample_prompt)
    say("  {q!r}\n    before: {a!r}\n    after:  {b!r}", "  {q!r}\n    微调前：{a!r}\n    微调后：{b!r}",
        q=sample_prompt, a=before_reply, b=after_reply)
    ch.unproven("sample reply", "", "")

# %% [markdown]
# ## 4. Which projections / 包装哪些投影
# The LoRA paper adapted attention's q and v. In Qwen3.5 three layers in four are DeltaNet layers,
# which have no q_proj: the same steps with q and v only reach a quarter of the layers.
#
# LoRA 论文只包装了注意力的 q 和 v。Qwen3.5 的层里四层有三层是 DeltaNet，没有 q_proj：只包装 q 和 v，
# 同样的步数只能改到四分之一的层。

# %%
section(4, "Which projections", "包装哪些投影")
attention_only = add_lora(load_model(ch.path, vision=False), r=RANK, alpha=ALPHA, targets=("q_proj", "v_proj"))
qv_train, _ = trainable(attention_only)
qv_layers = len({name.split(".")[1] for name in adapters(attention_only)})
all_layers = len({name.split(".")[1] for name in wrapped})
fine_tune(attention_only, STEPS)
qv_loss = loss_on(attention_only, train_batches)
del attention_only
layer_count = len(model.layers)
for label, count, layers, loss in ((tr("q_proj, v_proj:", "q_proj、v_proj："), qv_train, qv_layers, qv_loss),
                                   (tr("DEFAULT_TARGETS:", "DEFAULT_TARGETS："), n_train, all_layers, train_after)):
    column = pad(label, 17)                                          # CJK punctuation takes two columns
    say("  {t}{p:>10,} trainable, in {l} of {n} layers; training loss after {s} steps {x:.3f}",
        "  {t}{p:>10,} 个可训练参数，在 {n} 层中的 {l} 层；{s} 步后的训练损失 {x:.3f}",
        t=column, p=count, l=layers, n=layer_count, s=STEPS, x=loss)

# %% [markdown]
# ## 5. The adapter, saved in PEFT's format / 以 PEFT 的格式保存适配器
# adapter_config.json and adapter_model.safetensors, as PEFT writes them: PEFT's `PeftModel` loads it on
# transformers' model (tests/test_lora.py checks it), and so do servers: vLLM (`--enable-lora
# --lora-modules name=DIR`) and SGLang (`--lora-paths`) serve PEFT-format adapters beside one copy of
# the base model. Loaded into a fresh model, it must give the adapted model's logits. An adapter for
# another model or another rank is refused in one line, before anything of the model changes.
#
# adapter_config.json 和 adapter_model.safetensors，与 PEFT 写出的一样：PEFT 的 `PeftModel` 能把它加载到
# transformers 的模型上（tests/test_lora.py 检查过），推理服务也能：vLLM（`--enable-lora --lora-modules
# name=DIR`）和 SGLang（`--lora-paths`）在同一份原模型旁边加载 PEFT 格式的适配器。把它加载到一个新模型里，
# 必须得到微调后模型的 logits。属于别的模型或别的秩的适配器会被拒绝，只说一行，模型本身不受影响。

# %%
section(5, "The adapter, saved", "保存适配器")
run = Path(ch.args.run)
folder = save_adapter(model, run / "adapter")
adapter_bytes = (folder / qwen.lora.WEIGHTS).stat().st_size
with torch.no_grad():
    adapted_logits = model(probe)
fresh = load_adapter(load_model(ch.path, vision=False), folder)
with torch.no_grad():
    reload_gap = (fresh(probe) - adapted_logits).abs().max().item()
del model                                                            # its logits are kept: one model less in memory
say("  written to {f}: {b:,} bytes", "  写到 {f}：{b:,} 字节", f=folder, b=adapter_bytes)
say("  loaded into a fresh model: max |logit difference| from the adapted model = {d:.1e}",
    "  加载到新模型里：与微调后模型的 logits 最大差 = {d:.1e}", d=reload_gap)
other_rank = add_lora(load_model(ch.path, vision=False), r=RANK // 2, alpha=ALPHA)
other_width = 64 if ch.cfg.hidden_size == 32 else 32                 # any width but this model's
other_raw = small_config(512, hidden_size=other_width, layers=4, heads=2, head_dim=16, intermediate_size=64)
other_model = init_weights(Qwen35(Config.from_dict(other_raw)), seed=0)
for what, target in ((tr("a rank-4 model", "秩为 4 的模型"), other_rank), (tr("another model", "另一个模型"), other_model)):
    before = {k: v.clone() for k, v in target.state_dict().items() if "lora_" in k}   # load_adapter writes only these
    names = list(target.state_dict())
    try:
        load_adapter(target, folder)
        refusal = tr("accepted", "被接受了")
    except QwenError as e:
        refusal = tr(e.en, e.zh)
    kept = list(target.state_dict()) == names and all(torch.equal(target.state_dict()[k], v) for k, v in before.items())
    say("  into {w}: {m}\n    the model unchanged: {k}", "  加载到{w}：{m}\n    模型没有改变：{k}", w=what, m=refusal, k=kept)
del other_rank, other_model

# %% [markdown]
# ## 6. Merged into the weights / 合并进权重
# `merge` folds each adapter into its weight, W + (alpha / r) B A, and puts the plain projection back:
# the state dict has the checkpoint's names again and a forward pass costs what the base model's does.
# Exported (bf16, as the real checkpoint), it is a model folder every chapter and transformers load;
# bf16 rounds the merged weights, so its logits move by about that rounding. Serving one merged model
# needs no LoRA support at all; serving many adapters on one base needs no merge.
#
# `merge` 把每个适配器折进它的权重，W + (alpha / r) B A，再换回普通的投影：状态字典的名字又与检查点相同，
# 前向计算的代价与原模型一样。导出后（bf16，与真实检查点相同）是一个每章和 transformers 都能加载的模型
# 文件夹；bf16 会对合并后的权重取整，所以 logits 大约移动这么多。部署一个合并后的模型完全不需要 LoRA
# 支持；在一个原模型上部署多个适配器则不必合并。

# %%
section(6, "Merged into the weights", "合并进权重")
merge(fresh)
with torch.no_grad():
    merged_gap = (fresh(probe) - adapted_logits).abs().max().item()
merged_names = sum(1 for name in fresh.state_dict() if "lora_" in name)
text_config = {"architectures": ["Qwen3_5ForCausalLM"], **ch.cfg.raw.get("text_config", ch.cfg.raw),
               "tie_word_embeddings": ch.cfg.tie_word_embeddings}             # the language model's, flat
exported = export(fresh, text_config, run / "merged", write_tokenizer=copy_tokenizer(ch.path))
reloaded = load_model(exported, vision=False)
with torch.no_grad():
    exported_gap = (reloaded(probe) - adapted_logits).abs().max().item()
logit_range = adapted_logits.abs().max().item()
exported_held = loss_on(reloaded, [held_batch])
say("  merged in fp32: {k} LoRA tensors left; max |logit difference| from the adapted model = {d:.1e}",
    "  以 fp32 合并：剩下 {k} 个 LoRA 张量；与微调后模型的 logits 最大差 = {d:.1e}", k=merged_names, d=merged_gap)
say("  exported to {f} (bf16) and reloaded: max |logit difference| = {d:.3f} (logits up to {m:.1f})",
    "  导出到 {f}（bf16）再读入：logits 最大差 = {d:.3f}（logits 最大 {m:.1f}）", f=exported, d=exported_gap,
    m=logit_range)
say("  held-out loss of the exported model: {a:.3f} (adapted: {b:.3f}, base: {c:.3f})",
    "  导出模型的留出损失：{a:.3f}（微调后：{b:.3f}，原模型：{c:.3f}）", a=exported_held, b=held_after, c=held_before)
say("  try it: python main.py 9 --model {f}", "  试试：python main.py 9 --model {f}", f=exported)

# %% [markdown]
# ## How to explain it / 怎么讲给别人听
# Fine-tuning changes a weight matrix by a small amount, and that change has a low rank: it is close to
# B A with B tall and thin and A short and wide. LoRA keeps W frozen and learns only B and A, which for
# rank 8 are about one hundredth of W's numbers. B starts at zero, so training starts from the model
# as it is; the scale alpha / r keeps the update's size from depending on the rank chosen. The adapter
# is a small file that loads on the base model, here, in PEFT or in a server; merged, it disappears
# into the weights and the model runs at its old cost.
#
# 微调只把权重矩阵改动一点点，而这个改动的秩很低：它接近 B A，B 又高又窄，A 又矮又宽。LoRA 冻结 W，只学
# B 和 A，秩为 8 时它们的数只有 W 的百分之一左右。B 从零开始，所以训练从模型原来的样子出发；缩放 alpha / r
# 让更新的大小不随所选的秩变化。适配器是一个小文件，能加载到原模型上：这里、PEFT 里或推理服务里都行；
# 合并之后它就消失在权重里，模型的计算代价与原来一样。
#
# ## Summary / 小结
# - y = W x + (alpha / r) B (A x): W frozen, A random, B = 0, so step 0 is the base model exactly.
# - Only the adapters train: their gradients and AdamW's moments, never the base's.
# - Every big projection of every layer (DEFAULT_TARGETS), not attention's q and v only.
# - Saved in PEFT's format, loaded back with every key and shape checked; merged, the checkpoint's names again.
#
# - y = W x + (alpha / r) B (A x)：W 冻结，A 随机，B = 0，所以第 0 步就是原模型。
# - 只训练适配器：只有它们的梯度和 AdamW 的矩，原模型的权重没有。
# - 包装每层的每个大投影（DEFAULT_TARGETS），而不只是注意力的 q 和 v。
# - 以 PEFT 的格式保存，读回时检查每个键和形状；合并后名字又与检查点相同。

# %%
say("\nExercise for this chapter: 273 (the LoRA forward and the merge). Try it: python practice/judge.py 273",
    "\n本章练习：273（LoRA 的前向计算与合并）。试一试：python practice/judge.py 273")
