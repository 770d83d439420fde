# %% [markdown]
# # Chapter 9 · It talks: generation with a cache / 第 9 章 · 让它说话：带缓存的生成
#
# A language model gives scores for the next token only. To write a reply we pick a token, append
# it, and ask again, until it says it is done (`<|im_end|>`). `qwen/generate.py` does this with a
# cache: the prompt is read once (prefill), then every new token costs one small step (decode),
# because each layer keeps what it needs to continue: keys and values in the 6 full-attention
# layers, a 3-token conv window and a fixed 16 x 128 x 128 state in the 18 Gated DeltaNet layers.
# The prompt is written with the checkpoint's own chat template (`chat_template.jinja`).
#
# 语言模型只给出下一个词元的分数。要写出回复，就选一个词元、接到后面、再问一次，直到它表示结束
# （`<|im_end|>`）。`qwen/generate.py` 用缓存来做：提示词只读一遍（预填充），之后每个新词元只需一小步
# （解码），因为每一层都保存了继续所需的东西：6 个全注意力层保存键和值，18 个 Gated DeltaNet 层
# 保存 3 个词元的卷积窗口和固定大小的 16 x 128 x 128 状态。提示词用检查点自带的对话模板写成。
#
# Run: `python ch09_generate.py [--prompt "..."] [--max-new-tokens N] [--device cpu|cuda|mps] [--quant int8|int4] [--tiny] [--lang zh] [--mine]`

# %%
import functools
import math

import torch

import qwen.generate
from engine.cli import CHAPTER_REPLY_TOKENS, chapter, say, section, show_code, size, speculative_option
from qwen.cache import ROOM
from qwen.generate import (TextStream, check_sampling, generate, generate_ids, prompt_ids,
                           sample, stop_ids)
from qwen.lang import QwenError, tr
from practice.mine import put_in
from qwen.model import load_model
from qwen.mtp import check_speculative, speculative_ids
from engine.quantized import BF16_ROUNDING, KERNEL_ROWS, check_mode, load_quantized, weight_bytes
from engine.shapes import kv_cache_bytes
from qwen.quant import Int4Linear
from engine.packed import prepare
from engine.products import described
from engine.threads import note

ch = chapter("Chapter 9: generation with a cache", "第 9 章：带缓存的生成", mine=True, options={
    "--prompt": dict(default=None, help=("the message to send (default: a short bilingual one)",
                                         "要发送的消息（默认：一句简短的中英双语消息）")),
    "--max-new-tokens": dict(type=int, default=CHAPTER_REPLY_TOKENS, help=(
        f"longest reply, in tokens (default {CHAPTER_REPLY_TOKENS}; a reply that ends sooner stops at its end token)",
        f"回复的最大词元数（默认 {CHAPTER_REPLY_TOKENS}；更早结束的回复在结束词元处停止）")),
    "--device": dict(default="cpu", choices=["cpu", "cuda", "mps"], help=("where to compute", "在哪里计算")),
    "--dtype": dict(default="float32", choices=["float32", "bfloat16"], help=(
        "compute dtype; bfloat16: half the memory; with bf16 arithmetic each weight packed once for oneDNN "
        "(engine/packed.py), without it a prompt's projections computed in fp32 and rounded once (engine/upcast.py)",
        "计算精度；bfloat16：内存减半；有 bf16 运算时每个权重为 oneDNN 打包一次（engine/packed.py），没有时提示词的投影"
        "用 fp32 计算、只舍入一次（engine/upcast.py）")),
    "--think": dict(action="store_true", help=("let the model reason in <think> first", "让模型先在 <think> 中推理")),
    "--speculative": dict(default=None, metavar="K", help=(
        "the reply with speculative decoding: the MTP head drafts K tokens a step, the model verifies them; greedy, "
        "the same tokens in fp32 (default: off, plain decoding, the loop this chapter builds; chapter 12)",
        "用推测解码生成回复：MTP 头每步起草 K 个词元，由模型验证；贪心解码时 fp32 下词元相同（默认：关闭，"
        "用本章搭建的普通解码循环；见第 12 章）")),
    "--temperature": dict(type=float, default=0.0, metavar="T", help=(
        "section 2's reply sampled at temperature T (top-k 20, top-p 0.8, seed 0), with or without --speculative "
        "(default 0: greedy)",
        "第 2 节的回复以温度 T 采样（top-k 20，top-p 0.8，种子 0），加不加 --speculative 都可以（默认 0：贪心）")),
    "--quant": dict(default=None, metavar="MODE", help=(
        "int8 or int4: the reply from weight-only quantized weights (chapter 13; default: off, fp32)",
        "int8 或 int4：用只量化权重的模型生成回复（第 13 章；默认：关闭，fp32）"))})

# %% [markdown]
# ## The code / 代码
# What this chapter is about, the decode loop (section 6 writes it again in a dozen lines), sampling, stop tokens, the
# chat template and the text stream: `qwen/generate.py`, the whole file, read from the module itself (never a second
# copy): shown in a notebook, printed with `--code`, else where it is. The options are checked first, then the
# tokenizer and the chat template are read: without them the chapter stops before reading the weights.
#
# 本章讲的东西：解码循环（第 6 节用十几行再写一遍）、采样、停止词元、对话模板和文本流：`qwen/generate.py` 的完整文件，
# 直接从模块读出（不是另一份拷贝）：notebook 里直接显示，`--code` 打印，否则只说它在哪里。先检查选项，再读分词器和
# 对话模板：没有它们，本章在读权重之前就停下。

# %%
taught = show_code(ch, qwen.generate)
args, path, cfg = ch.args, ch.path, ch.cfg
torch.set_grad_enabled(False)


def check_device(device):
    """A device this torch can use, else one line that says what is missing (not argparse's
    "invalid choice: 'cuda' (choose from 'cpu')" on a CUDA build of torch without a GPU)."""
    if device == "cuda" and not torch.cuda.is_available():
        build = torch.version.cuda
        raise QwenError("--device cuda: no CUDA GPU was found ({why}). Use --device cpu.",
                        "--device cuda：没有找到 CUDA GPU（{why_zh}）。请用 --device cpu。",
                        why=f"this torch is built for CUDA {build}, but no GPU answers" if build
                        else "this torch is built for the CPU only",
                        why_zh=f"这个 torch 是为 CUDA {build} 构建的，但没有可用的 GPU" if build
                        else "这个 torch 只支持 CPU")
    if device == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise QwenError("--device mps: no Apple GPU (MPS) was found. Use --device cpu.",
                        "--device mps：没有找到 Apple GPU（MPS）。请用 --device cpu。")


if args.max_new_tokens < 1:
    raise QwenError("--max-new-tokens must be at least 1.", "--max-new-tokens 至少为 1。")
speculative = speculative_option(args.speculative)      # a bad K: one line, before the weights are read
check_sampling(args.temperature)                        # a negative or nan temperature: one line, likewise
reply_sampling = dict(temperature=args.temperature, top_k=20, top_p=0.8, seed=0) if args.temperature else {}
check_device(args.device)
if args.quant is not None:
    check_mode(args.quant, speculative, args.mine)       # a bad mode or mix: one line, before the weights are read
    if args.device != "cpu" or args.dtype != "float32":
        raise QwenError("--quant runs on the CPU from the fp32 model: leave out --device and --dtype.",
                        "--quant 在 CPU 上、从 fp32 模型量化：请去掉 --device 和 --dtype。")
tok, template = ch.needs_chat()        # after the checks (the 248k-entry vocabulary is 1-2 s of CPU to read),
                                       # before the weights: without both the chapter stops here
if args.quant is None:
    model = load_model(path, dtype=getattr(torch, args.dtype), vision=False).to(args.device)   # text only
    prepare(model)                                      # bf16 with bf16 arithmetic: each weight packed now, not
                                                        # inside a timing (engine/packed.py); else nothing
else:                                                   # read from the file and quantized a block at a time:
    model = load_quantized(path, args.quant)            # never the whole model in full precision (chapter 13)
if speculative is not None:
    check_speculative(model, speculative)               # no MTP head in this checkpoint: one line
if args.quant is not None:
    before, stored = model.stored                       # the file's bf16, not chapter 13's fp32
    stored_bytes, quantized_bytes = size(before), size(weight_bytes(model))
    say("  weights quantized to {q} (chapter 13): {a} in {d} -> {b}", "  权重已量化为 {q}（第 13 章）：{d} 的 {a} -> {b}",
        q=args.quant, a=stored_bytes, d=stored, b=quantized_bytes)
if ch.tiny:
    say("  The tiny checkpoint's weights are random: it generates made-up tokens, not language.",
        "  小检查点的权重是随机的：它生成的是编造的词元，不是语言。")

# %% [markdown]
# ## 1. The chat template / 对话模板
# The model was trained on conversations written as `<|im_start|>role\n...<|im_end|>`. The reply
# opens with a `<think>` block: left open, the model reasons first; closed at once
# (`enable_thinking=False`, our default), it answers directly.
#
# 模型是在写成 `<|im_start|>role\n...<|im_end|>` 的对话上训练的。回复以一个 `<think>` 块开头：
# 不关上它，模型先推理；马上关上它（`enable_thinking=False`，我们的默认），模型直接回答。

# %%
section(1, "The prompt, written by the chat template", "由对话模板写出的提示词")
prompt = "Say hello in English and in Chinese, in one short sentence. 用一句话打招呼。" if args.prompt is None else args.prompt
messages = [{"role": "user", "content": prompt}]
ids = prompt_ids(tok, messages, template=template, enable_thinking=args.think)
prompt_text = template.render(messages, enable_thinking=args.think)
n_prompt, stop_pieces = len(ids), " / ".join(tok.id_to_piece(i) for i in sorted(stop_ids(tok)))
say("  {text!r}", "  {text!r}", text=prompt_text)
say("  {n} tokens; the reply ends at {stops}", "  共 {n} 个词元；回复在 {stops} 处结束", n=n_prompt, stops=stop_pieces)
yours = put_in(model, ids) if args.mine else None   # --mine: your solved exercises in the model from here on

# %% [markdown]
# ## 2. A greedy reply, streamed / 贪心解码，流式输出
# Greedy decoding takes the most likely token every time: the same prompt always gives the same reply.
#
# 贪心解码每次都取最可能的词元：同样的提示词总是得到同样的回复。

# %%
if reply_sampling:                                                 # --temperature: not greedy
    section(2, "A sampled reply, printed as it is generated", "采样回复，边生成边打印")
else:
    section(2, "A greedy reply, printed as it is generated", "贪心回复，边生成边打印")
stats, reply_ids, reply_cache = {}, [], model.new_cache()           # section 3 looks into the cache
reply_whole = False                                                 # until the reply has ended (a notebook's
print("  ", end="", flush=True)                                     # interrupt can stop it inside a layer)
reply = []
decode = generate_ids if speculative is None else functools.partial(speculative_ids, k=speculative)
for piece in generate(model, tok, ids, max_new_tokens=args.max_new_tokens, stats=stats, ids_out=reply_ids,
                      cache=reply_cache, decode=decode, **reply_sampling):
    reply.append(piece)
    shown = piece.replace("\n", "\n  ")                             # the reply's lines, indented
    print(shown, end="", flush=True)
print()
reply_whole = True
why = (tr("stopped at the end token", "遇到结束词元而停止") if stats["stopped"]
       else tr("stopped at --max-new-tokens", "达到 --max-new-tokens 而停止"))
n_new = stats["new_tokens"]                                        # a decode step per token after the first
decoded = (tr("reply {n} tokens: decode {b:.1f} tokens/s", "回复 {n} 个词元：解码 {b:.1f} 词元/秒",
              n=n_new, b=(n_new - 1) / max(stats["decode_s"], 1e-9)) if n_new > 1
           else tr("reply 1 token, picked from the prefill's logits: no decode step to time",
                   "回复 1 个词元，从预填充的 logits 里选出：没有可计时的解码步骤"))
prefill_rate = stats["prompt_tokens"] / stats["prefill_s"]
say("  prompt {p} tokens: prefill {a:.1f} tokens/s; {decoded} ({why})",
    "  提示词 {p} 个词元：预填充 {a:.1f} 词元/秒；{decoded}（{why}）",
    p=stats["prompt_tokens"], a=prefill_rate, decoded=decoded, why=why)
if reply_sampling:
    say("  (sampled at --temperature {t}, top-k 20, top-p 0.8, seed 0: not the greedy reply)",
        "  （以 --temperature {t}、top-k 20、top-p 0.8、种子 0 采样：不是贪心回复）", t=args.temperature)
if speculative is not None:
    per_pass = max(stats["new_tokens"] - 1, 0) / max(stats["rounds"], 1)       # tokens per forward pass
    say("  speculative decoding, k = {k}: {a} of {d} drafts accepted, {r:.2f} tokens per forward pass of the model "
        "(chapter 12)",
        "  推测解码，k = {k}：{d} 个草稿中接受 {a} 个，模型每次前向计算 {r:.2f} 个词元（第 12 章）",
        k=speculative, a=stats["accepted"], d=stats["drafted"], r=per_pass)
note(ch.threads)
path_taken = described(model.layers[0].mlp.up_proj.weight) if args.quant is None else None
if path_taken:
    say("  (products: {p})", "  （乘积：{p}）", p=path_taken)
if ch.tiny:
    say("  (random weights: the reply above is made-up tokens)", "  （随机权重：上面的回复是编造的词元）")

# %% [markdown]
# ## 3. What the cache holds / 缓存里有什么
# Full attention must keep every past key and value; Gated DeltaNet keeps a fixed-size state.
# Qwen3.5 puts full attention in only 6 of 24 layers, so its cache grows 4x slower than a model
# with full attention everywhere. We look into section 2's cache: it holds the prompt and the
# reply but its last token (that one was picked, never read). One more step reads it, and its
# logits must be those of reading all the tokens at once, without a cache.
#
# 全注意力必须保留每个过去词元的键和值；Gated DeltaNet 只保留大小固定的状态。Qwen3.5 只在
# 24 层中的 6 层用全注意力，所以它的缓存增长速度是每层都用全注意力的模型的四分之一。我们看的是第 2 节
# 留下的缓存：它装着提示词和除最后一个词元以外的回复（最后那个是选出来的，还没读过）。再走一步读入它，
# 得到的 logits 必须与不用缓存、一次读入全部词元的结果相同。

# %%
section(3, "The cache after this reply", "这次回复之后的缓存")
read = ids + reply_ids                                             # what the cache holds after one more step
with torch.inference_mode():                                       # as generate_ids, which made the cache
    if reply_whole:                                                # the prompt and the reply but its last token
        cache = reply_cache.copy()                                 # (picked, never read); a copy: the cell reruns alike
    else:                                                          # section 2 was stopped, maybe inside a layer:
        cache = model.new_cache()                                  # its cache may be half-written, so read again
        model(torch.tensor([read[:-1]]), cache=cache, last=True)
    held_before = cache.length
    last_cached = model(torch.tensor([read[-1:]]), cache=cache, last=True)   # one more step: the last token
full_layers, linear_layers = cfg.full_attention_layers, cfg.linear_attention_layers
kv = sum(cache[i].nbytes for i in full_layers)
fixed = sum(cache[i].nbytes for i in linear_layers)
k_cached = cache[full_layers[0]].k
itemsize = k_cached.element_size()                                  # fp32: see qwen/attention.py
rooms = [cache[i] for i in full_layers]                            # the buffers k and v are views of
allocated = sum(r.k_buffer.nbytes + r.v_buffer.nbytes for r in rooms)
n_full, n_linear = len(full_layers), len(linear_layers)
say("  {n} tokens read: keys/values of {a} attention layers {kv}, conv windows + states of {b} linear layers {fx}",
    "  已读 {n} 个词元：{a} 个注意力层的键/值 {kv}，{b} 个线性层的卷积窗口 + 状态 {fx}",
    n=cache.length, a=n_full, kv=size(kv), b=n_linear, fx=size(fixed))
dtype = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(k_cached.dtype, str(k_cached.dtype))
bf16_share, room = itemsize / 2, rooms[0].k_buffer.shape[2]          # chapters 6-7 count 2 bytes a number
say("  k and v are kept in {d}, {i} bytes a number; chapters 6 and 7 count bf16, 2 bytes, so their KV cache\n"
    "  sizes are 1/{r:g} of these; the buffers behind k and v: {al}, room for {room} tokens (grown {step} at a time)",
    "  k 和 v 以 {d} 保存，每个数 {i} 字节；第 6、7 章按 bf16（2 字节）计算，所以那里的键值缓存大小是\n"
    "  这里的 1/{r:g}；k 和 v 背后的缓冲区：{al}，可容纳 {room} 个词元（每次增长 {step} 个）",
    d=dtype, i=itemsize, r=bf16_share, al=size(allocated), room=room, step=ROOM)
for tokens in (cache.length, 32768):
    ours = size(kv_cache_bytes(cfg, tokens, itemsize, layers=n_full) + fixed)
    all_layers = size(kv_cache_bytes(cfg, tokens, itemsize))
    say("  at {t:>6,} tokens: this cache {a:>9}; keys/values ({d}) in all {n} layers would be {b:>9}",
        "  {t:>6,} 个词元时：这个缓存 {a:>9}；若全部 {n} 层都存键/值（{d}）则需 {b:>9}",
        t=tokens, a=ours, n=cfg.num_hidden_layers, b=all_layers, d=dtype)
recomputed = model(torch.tensor([read]))[:, -1:]
cache_gap = (last_cached - recomputed).abs().max().item()
n_read = len(read)
whose = tr("the reply's cache", "回复留下的缓存") if reply_whole else tr("a new cache", "一个新的缓存")
say("  cached decoding = reading everything again: max |difference| of the last logits = {d:.1e}\n"
    "  (one more step from {whose}, which held {h} tokens, against all {n} read at once)",
    "  带缓存的解码 = 全部重新读一遍：最后一步 logits 的最大差 = {d:.1e}\n"
    "  （从{whose}（{h} 个词元）再走一步，与一次读入全部 {n} 个词元相比）",
    d=cache_gap, h=held_before, n=n_read, whose=whose)
if not reply_whole:
    say("  (section 2 was stopped before its end: its cache may be half-written, so the prompt and the reply\n"
        "  so far were read again into a new one)",
        "  （第 2 节在结束前被中断：它的缓存可能只写了一半，所以把提示词和已有的回复重新读进了一个新的缓存）")
logit_scale = recomputed.abs().max().item()                          # the size of the logits compared
rounding_layers = cfg.num_hidden_layers + 1                          # the decoder layers and the output layer
quant_tolerance = BF16_ROUNDING * logit_scale * math.sqrt(rounding_layers)
within_tolerance = cache_gap <= quant_tolerance
gap_share = cache_gap / max(logit_scale, 1e-30)                      # the difference, as a share of the logits
if args.quant is not None:
    say("  (the logits are up to {s:.2f} in size: the difference is {r:.2%} of that. One rounding to bf16 moves a\n"
        "  value by up to 2^-8 = {u:.2%} of it; the {L} layers' roundings (decoder layers, output layer) add up\n"
        "  like a random walk: a tolerance of 2^-8 x {s:.2f} x sqrt({L}) = {t:.2e}; within it: {ok})",
        "  （logits 的大小最大到 {s:.2f}：这个差是它的 {r:.2%}。舍入到 bf16 一次，数值最多移动它的 2^-8 = {u:.2%}；\n"
        "  {L} 层（解码层和输出层）的舍入像随机游走一样累加：容差为 2^-8 x {s:.2f} x sqrt({L}) = {t:.2e}；在容差内：{ok}）",
        s=logit_scale, r=gap_share, u=BF16_ROUNDING, L=rounding_layers, t=quant_tolerance,
        ok=within_tolerance)
if args.quant == "int8" and len(read) > KERNEL_ROWS:                 # the gap is the kernel's bf16, not the cache
    say("  (quantized: a step of one token runs torch's int8 kernel with bf16 inputs, reading all {n} tokens at\n"
        "  once the plain fp32 path (engine/quantized.py, KERNEL_ROWS): the two agree to bf16's rounding, not fp32's)",
        "  （量化模型：一次一个词元时走 torch 的 int8 内核，输入是 bf16；一次读入全部 {n} 个词元时走朴素的 fp32\n"
        "  算法（engine/quantized.py，KERNEL_ROWS）：两者只在 bf16 的舍入范围内一致，而不是 fp32 的）", n=n_read)
elif args.quant == "int4":                                           # the 4-bit kernel, whatever the rows
    int4 = [m.kernel for m in model.modules() if isinstance(m, Int4Linear)]
    on_kernel, n_int4 = sum(int4), len(int4)
    say("  (quantized: {k} of {m} 4-bit layers run torch's 4-bit kernel, for one token and for all {n} at once\n"
        "  alike; it takes bf16 inputs and returns bf16 (engine/quantized.py; the others fit none of its\n"
        "  shapes and dequantize to fp32): the two agree to bf16's rounding, not fp32's)",
        "  （量化模型：{m} 个 4 位层中有 {k} 个走 torch 的 4 位内核，一次一个词元和一次读入全部 {n} 个词元都一样；\n"
        "  它的输入和输出都是 bf16（engine/quantized.py；其余的层不符合它的形状要求，反量化为 fp32）：\n"
        "  两者只在 bf16 的舍入范围内一致，而不是 fp32 的）", k=on_kernel, m=n_int4, n=n_read)

# %% [markdown]
# ## 4. Sampling / 采样
# Sampling divides the logits by a temperature, keeps the top-k tokens, then the smallest set
# whose probabilities reach top-p (the token that crosses top-p stays), and draws one. A seed
# makes the draw repeatable. (Qwen suggests temperature 0.7, top-p 0.8, top-k 20 without thinking.)
#
# 采样先把 logits 除以温度，保留 top-k 个词元，再保留概率之和达到 top-p 的最小集合（越过 top-p 的
# 那个词元也保留），然后抽取一个。种子让抽取可以重复。（不思考时，Qwen 建议温度 0.7、top-p 0.8、top-k 20。）

# %%
section(4, "Sampled against greedy", "采样与贪心的对比")
sampling = dict(temperature=0.7, top_k=20, top_p=0.8)            # Qwen's suggestion; section 6 uses it too
settings = dict(sampling, max_new_tokens=min(args.max_new_tokens, 16))
drawn_ids = [[], [], []]                                          # section 6 checks its loop against seed 0's
sampled = ["".join(generate(model, tok, ids, seed=seed, ids_out=out, **settings))
           for seed, out in zip((0, 0, 1), drawn_ids)]
greedy = "".join(reply)                                           # section 2's text, as streamed
stops = stop_ids(tok)
plain_reply = speculative is None and not reply_sampling and reply_whole   # section 2's: greedy, to its end
greedy_ids = reply_ids if plain_reply else list(generate_ids(model, ids, max_new_tokens=args.max_new_tokens,
                                                             stop=stops, vocab=tok.vocab_size))
for seed, text in zip((0, 0, 1), sampled):
    say("  seed {s}: {t!r}", "  种子 {s}：{t!r}", s=seed, t=text)
repeatable, seeds_differ = sampled[0] == sampled[1], sampled[0] != sampled[2]
greedy_differs = drawn_ids[0] != greedy_ids[:len(drawn_ids[0])]   # the greedy reply's first tokens, by id
if not plain_reply:
    how = (tr("sampled", "采样得到的") if reply_sampling else tr("speculative", "推测解码得到的")
           if speculative is not None else tr("stopped before its end", "在结束前被中断的"))
    say("  (section 2's reply was {how}: the greedy reply compared here is generate_ids' own, plain decoding)",
        "  （第 2 节的回复是{how}：这里比较的贪心回复是 generate_ids 自己用普通解码生成的）", how=how)
say("  same seed, same text: {a}; seed 0 vs seed 1 differ: {b}; seed 0 vs greedy differ: {c}",
    "  相同种子，相同文本：{a}；种子 0 与种子 1 不同：{b}；种子 0 与贪心不同：{c}",
    a=repeatable, b=seeds_differ, c=greedy_differs)

# %% [markdown]
# ## 5. Text that spans tokens / 跨词元的字符
# Tokens are bytes. A common Chinese character is 3 UTF-8 bytes (the rarer ones of CJK Extension B,
# such as 𠀀, are 4: chapter 2) and one token may hold only part of it;
# printing each token's bytes on their own would show "�". The stream keeps the unfinished bytes
# until the next token completes the character.
#
# 词元是字节。常用汉字是 3 个 UTF-8 字节（CJK 扩展 B 区的生僻字，例如 𠀀，是 4 个：见第 2 章），
# 一个词元可能只装下它的一部分；把每个词元的字节单独打印
# 出来会显示 "�"。流式输出把没写完的字节留着，直到下一个词元把这个字符补完。

# %%
section(5, "Characters split across tokens", "被拆到多个词元里的字符")
rare = "龘"                                                       # a rare character: Qwen3.5's vocabulary splits it
rare_ids = tok.encode(rare)
demo = TextStream(tok)
rare_bytes, n_rare = len(rare.encode("utf-8")), len(rare_ids)
one_by_one = [tok.token_bytes(i).decode("utf-8", errors="replace") for i in rare_ids]   # each token's bytes alone
streamed = [demo.push(i) for i in rare_ids]                                           # the stream waits
say("  {c!r} ({b} UTF-8 bytes) is {n} tokens: their bytes decoded one token at a time give {a}; the stream gives {p}",
    "  {c!r}（{b} 个 UTF-8 字节）是 {n} 个词元：逐个词元解码它们的字节得到 {a}；流式输出得到 {p}",
    c=rare, b=rare_bytes, n=n_rare, p=streamed, a=one_by_one)
stream = TextStream(tok)
split = sum(1 for t in reply_ids if t not in stop_ids(tok) and stream.push(t) == "")
n_reply, replaced = len(reply_ids), greedy.count("\ufffd")
say("  {s} of the reply's {n} tokens ended inside a character and waited for the next; "
    "replacement characters in the streamed text: {r}",
    "  回复的 {n} 个词元中有 {s} 个停在字符中间，等待下一个词元；流式文本中的替换字符：{r}",
    s=split, n=n_reply, r=replaced)

# %% [markdown]
# ## 6. The loop itself / 循环本身
# Everything `generate_ids` does, in a dozen lines: read the prompt once, then pick a token from
# the last logits (`sample`: the largest at temperature 0, else a seeded draw), append it, feed it
# back, until a stop token or the limit. The same token ids as `generate_ids` (shown at the top of
# this chapter), greedy and sampled with the same seed, or the loop is wrong. The greedy ids of
# `generate_ids` are section 2's reply (`generate` streams them), unless it was sampled, speculative or
# stopped before its end (then section 4 asks `generate_ids` for them, to compare its draws with); the
# sampled ones are section 4's first draw (seed 0, its settings and length).
# The products run through the engine's kernel (engine/products.py, behind qwen/linear.py's seam), as
# everywhere in this chapter: the same numbers as F.linear to rounding, so the ids can be compared exactly.
#
# `generate_ids` 做的一切，十几行就能写完：提示词读一遍，然后从最后的 logits 里选一个词元（`sample`：
# 温度为 0 时取最大的，否则用带种子的随机抽取），接到后面、再喂回去，直到停止词元或达到上限。它给出的
# 词元编号必须与 `generate_ids`（本章开头显示的）相同，贪心和同一种子的采样都一样，否则就是循环写错了。
# `generate_ids` 的贪心编号就是第 2 节的回复（`generate` 把它们流式输出），除非那次回复是采样或推测解码得到的，
# 或在结束前被中断（那时第 4 节向 `generate_ids` 要来贪心编号，与它的抽取比较）；采样的编号就是第 4 节的第一次
# 抽取（种子 0，同样的设置和长度）。
# 乘积经由引擎的内核计算（engine/products.py，位于 qwen/linear.py 的接口之后），本章处处如此：与 F.linear
# 只差舍入误差，所以可以逐个比较编号。

# %%
def decode_loop(model, prompt, max_new_tokens, stop, vocab, seed=None, **sampling):
    """The decode loop by hand: prefill once, then pick, append, feed back."""
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    cache = model.new_cache()
    logits = model(torch.tensor([prompt]), cache=cache, last=True)[0, -1]  # prefill: the whole prompt
    reply = []
    while len(reply) < max_new_tokens:
        token = sample(logits[:vocab], generator=generator, **sampling)        # pick
        reply.append(token)                                                    # append
        if token in stop:
            break
        logits = model(torch.tensor([[token]]), cache=cache, last=True)[0, -1]      # feed back: one token
    return reply


section(6, "The decode loop by hand against generate_ids", "手写的解码循环与 generate_ids 对比")
n = args.max_new_tokens
by_hand = decode_loop(model, ids, n, stops, tok.vocab_size)
library = greedy_ids                                              # section 4's: section 2's reply when greedy
loop_agrees = by_hand == library
n_hand, first_hand, n_library = len(by_hand), by_hand[:4], len(library)
say("  greedy: by hand {n} tokens {first}...; generate_ids {m} tokens; the same ids: {same}",
    "  贪心：手写 {n} 个词元 {first}……；generate_ids {m} 个词元；编号相同：{same}",
    n=n_hand, first=first_hand, m=n_library, same=loop_agrees)
sampled_library = drawn_ids[0]                                             # section 4's first draw: generate_ids
sampled_by_hand = decode_loop(model, ids, settings["max_new_tokens"], stops, tok.vocab_size, seed=0, **sampling)
sampled_agrees = sampled_by_hand == sampled_library
n_sampled, first_sampled = len(sampled_by_hand), sampled_by_hand[:4]
say("  sampled (temperature 0.7, top-k 20, top-p 0.8, seed 0): by hand {n} tokens {first}...; the same ids as "
    "section 4's draw: {same}",
    "  采样（温度 0.7、top-k 20、top-p 0.8、种子 0）：手写 {n} 个词元 {first}……；与第 4 节抽出的编号相同：{same}",
    n=n_sampled, first=first_sampled, same=sampled_agrees)

# %% [markdown]
# ## How to explain it / 怎么讲给别人听
# Generation is a loop: read the prompt once, then repeatedly pick a token from the last logits and
# feed it back. The cache makes each new token cheap: attention layers keep every key and value
# (growing), Gated DeltaNet layers keep a fixed-size state (not growing), so Qwen3.5's cache grows
# in 6 layers instead of 24. Greedy picks the maximum; sampling trades repeatability for variety,
# and a seed brings repeatability back.
#
# 生成就是一个循环：提示词只读一遍，然后反复从最后的 logits 里选一个词元、再喂回去。缓存让每个新词元都
# 很便宜：注意力层保存所有的键和值（不断增长），Gated DeltaNet 层保存固定大小的状态（不增长），所以
# Qwen3.5 的缓存只在 6 层里增长，而不是 24 层。贪心解码取最大值；采样用可重复性换多样性，种子又把可重复性找回来。
#
# ## Summary / 小结
# - generate(model, tok, prompt): chat template, prefill once, decode one token at a time, stop at <|im_end|>.
# - Cache: k, v for full attention; conv window + fp32 state for Gated DeltaNet; cached = recomputed.
# - Sampling: temperature, top-k, top-p (the token that crosses p is kept), a seed for repeatability.
#
# - generate(model, tok, prompt)：对话模板，预填充一次，逐个词元解码，遇到 <|im_end|> 停止。
# - 缓存：全注意力层存 k、v；Gated DeltaNet 层存卷积窗口和 fp32 状态；带缓存 = 重新计算。
# - 采样：温度、top-k、top-p（越过 p 的词元保留），用种子保证可重复。

# %%
say("\nExercises for this chapter: 231, 232. Chat with it: python main.py chat",
    "\n本章练习：231、232。和它对话：python main.py chat")
