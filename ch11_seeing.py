# %% [markdown]
# # Chapter 11 · It sees: an image in the prompt / 第 11 章 · 它看得见：提示词里的图像
#
# Chapter 10 turned a picture into tokens of the language model's width. Here they go into a
# conversation. The chat template writes an image as `<|vision_start|><|image_pad|><|vision_end|>`;
# the one pad becomes as many pad tokens as the image has tokens, and the model puts the tower's
# vectors in their place instead of the pad's embedding. Their positions are three numbers each,
# (time, row, column): the 3D RoPE of which chapter 4's plain RoPE is the special case. Then the
# model answers about the picture, streamed, with the cache of chapter 9.
#
# 第 10 章把一张图像变成了与语言模型同宽的词元。本章把它们放进对话里。对话模板把一张图像写成
# `<|vision_start|><|image_pad|><|vision_end|>`；这一个占位词元展开成与图像词元数一样多的图像占位词元，
# 模型在它们的位置上放入视觉塔的向量，而不是占位词元的嵌入。它们的位置各是三个数（时间、行、列）：
# 这就是 3D RoPE，第 4 章的普通 RoPE 是它的特例。然后模型针对图像作答，流式输出，用的是第 9 章的缓存。
#
# Run: `python ch11_seeing.py [--image PATH] [--prompt "..."] [--max-new-tokens N] [--model PATH] [--tiny] [--lang zh]`

# %%
import time

import torch
from PIL import Image

import qwen.image
from engine.cli import CHAPTER_REPLY_TOKENS, chapter, say, section, show_code
from engine.pictures import demo_image
from engine.threads import note
from qwen.generate import generate, image_prompt_ids, prompt_ids, with_images
from qwen.image import load_image, preprocess
from qwen.lang import QwenError, tr
from qwen.model import load_model
from qwen.rope import rope_index

ch = chapter("Chapter 11: an image in the prompt", "第 11 章：提示词里的图像", options={
    "--image": dict(metavar="PATH", default=None, help=(
        "the picture to ask about (default: the one chapter 10 draws)",
        "要问的图像（默认：第 10 章画的那张）")),
    "--prompt": dict(default=None, help=("the question about it (default: a short one in both languages)",
                                         "关于图像的问题（默认：一句简短的中英双语问题）")),
    "--max-new-tokens": dict(type=int, default=CHAPTER_REPLY_TOKENS, help=(
        f"longest reply, in tokens (default {CHAPTER_REPLY_TOKENS})", f"回复的最大词元数（默认 {CHAPTER_REPLY_TOKENS}）"))})


# %% [markdown]
# ## The code / 代码
# What this chapter is about starts from the picture: `qwen/image.py`, the whole file (from an image file to the rows
# of numbers the tower reads), read from the module itself (never a second copy): shown in a notebook, printed with
# `--code`, else where it is. The rest is in files of earlier chapters: `rope_index` in `qwen/rope.py` (section 1),
# `image_prompt_ids` in `qwen/generate.py` (section 2), and `Qwen35._with_images` in `qwen/model.py`, which puts the
# tower's vectors in place of the pad tokens (section 3). A checkpoint without a tower, or one whose config.json names
# no image token, stops the chapter here.
#
# 本章讲的东西从图像开始：`qwen/image.py` 的完整文件（从图像文件到视觉塔读的一行行数），直接从模块读出（不是另一份
# 拷贝）：notebook 里直接显示，`--code` 打印，否则只说它在哪里。其余的在前面各章的文件里：`qwen/rope.py` 的
# `rope_index`（第 1 节），`qwen/generate.py` 的 `image_prompt_ids`（第 2 节），以及 `qwen/model.py` 的
# `Qwen35._with_images`，它把视觉塔的向量放到占位词元的位置上（第 3 节）。没有视觉塔的检查点，或 config.json
# 里没有图像词元的检查点，让本章在这里停下。

# %%
taught = show_code(ch, qwen.image)
args, path, cfg, tok = ch.args, ch.path, ch.cfg, ch.tokenizer
torch.set_grad_enabled(False)
if args.max_new_tokens < 1:
    raise QwenError("--max-new-tokens must be at least 1.", "--max-new-tokens 至少为 1。")
tower = isinstance(cfg.raw.get("vision_config"), dict) and any(
    n.startswith("model.visual.") for n in ch.W.all_names)
if not tower:
    say("  (this checkpoint has no vision tower (a text-only export): this chapter needs one; it stops here)",
        "  （这个检查点没有视觉塔（纯文本导出）：本章需要它，到此为止）")
    raise SystemExit(0)
try:                                                                    # the image token's id, from config.json
    image_id, merge = cfg.image_tokens()
except QwenError as e:                                                  # e.g. an id outside the vocabulary
    why = str(e)
    say("  (this checkpoint cannot take an image in a prompt: {e} This chapter needs that; it stops here)",
        "  （这个检查点不能在提示词里放图像：{e}本章需要这一点，到此为止）", e=why)
    raise SystemExit(0)


def cell(*numbers):
    """(t, h, w) written as each language writes coordinates."""
    return tr("(" + ", ".join(map(str, numbers)) + ")", "（" + "，".join(map(str, numbers)) + "）")


# %% [markdown]
# ## 1. 3D positions: the image is a grid, the text a line / 3D 位置：图像是网格，文字是一条线
# Every token gets three positions, (t, h, w), and RoPE gives each stream its own share of the
# frequency pairs, interleaved (`mrope_section`). A text token's three are equal: plain RoPE
# (chapter 4). An image's tokens stand on its grid: the same time, their own row and column, all
# counted from where the image starts. The text after the image goes on at the image's largest
# position + 1, not after as many positions as the image has tokens. `qwen/rope.py rope_index`.
#
# 每个词元有三个位置（t、h、w），RoPE 把频率对交替分给三个流（`mrope_section`）。文字词元的三个位置
# 相等：就是普通 RoPE（第 4 章）。图像的词元排在它的网格上：时间相同，各有自己的行和列，都从图像开始
# 的位置算起。图像之后的文字从图像最大的位置 + 1 接着排，而不是跳过与图像词元数一样多的位置。
# `qwen/rope.py rope_index`。

# %%
section(1, "3D positions: the image is a grid, the text a line", "3D 位置：图像是网格，文字是一条线")
start_id, end_id = cfg.raw["vision_start_token_id"], cfg.raw["vision_end_token_id"]
small = torch.tensor([[1, 4, 6]])                                   # (t, h, w) patches: 2 x 3 tokens after merging
n_small = int(small.prod()) // merge ** 2
text_before, text_after = (tok.encode("Look:"), tok.encode(" What?")) if tok is not None else ([0, 1], [2, 3])
ids = text_before + [start_id] + [image_id] * n_small + [end_id] + text_after
pos = rope_index(torch.tensor([ids]), small, cfg)[:, 0]           # (3, seq)
small_grid = " x ".join(map(str, small[0].tolist()))
say("  a grid of {g} patches, {n} tokens after merging {m} x {m}; t, h, w of each token:",
    "  一个 {g} 个图块的网格，{m} x {m} 合并后是 {n} 个词元；每个词元的 t、h、w：", g=small_grid, n=n_small, m=merge)
names = {start_id: "<|vision_start|>", end_id: "<|vision_end|>", image_id: "<|image_pad|>"}
for i, token in enumerate(ids):
    name = names.get(token) or (tok.readable(token) if tok is not None else f"#{token}")
    thw = cell(*pos[:, i].tolist())                                 # (t, h, w) of token i
    say("    {i:>2}  {n:<18} {p}", "    {i:>2}  {n:<18} {p}", i=i, n=name, p=thw)
end = len(text_before) + 1 + n_small                                # <|vision_end|>, the first token after the image
after_image, image_largest = int(pos[0, end]), int(pos[:, len(text_before) + 1:end].max())
say("  after the image: <|vision_end|> at position {a} = the image's largest position {m} + 1; "
    "counting the tokens before it would give {b}",
    "  图像之后：<|vision_end|> 在位置 {a} = 图像最大的位置 {m} + 1；按它前面的词元数计算会是 {b}",
    a=after_image, m=image_largest, b=end)
big = torch.tensor([[1, 28, 28]])                                   # 448 x 448 pixels at patch 16
n_big = int(big.prod()) // merge ** 2
big_pos = rope_index(torch.tensor([[start_id] + [image_id] * n_big + [end_id]]), big, cfg)
big_side, big_span = 28 // merge, int(big_pos[0, 0, -1] - big_pos[0, 0, 1])
say("  a 448 x 448 picture (Qwen3.5-0.8B: 28 x 28 patches of 16 pixels): {n} tokens on a {s} x {s} grid, "
    "spanning {k} positions, not {n}",
    "  一张 448 x 448 的图像（Qwen3.5-0.8B：28 x 28 个 16 像素的图块）：{n} 个词元，排在 {s} x {s} 的网格上，"
    "只占 {k} 个位置，而不是 {n} 个",
    n=n_big, s=big_side, k=big_span)

# %% [markdown]
# ## 2. The prompt with an image / 带图像的提示词
# A user message's content is a list: an image item, then the text. The checkpoint's own chat
# template writes the image as three tokens; `image_prompt_ids` repeats the pad to the image's
# token count, as transformers' processor does. The token ids come from config.json.
#
# 用户消息的内容是一个列表：一个图像项，然后是文字。检查点自带的对话模板把图像写成三个词元；
# `image_prompt_ids` 像 transformers 的处理器那样，把占位词元重复到图像的词元数。词元编号来自 config.json。

# %%
tok, template = ch.needs_chat(rest=True)           # chat_template.jinja, else tokenizer_config.json's
section(2, "The prompt with an image", "带图像的提示词")
image = load_image(args.image) if args.image else demo_image()
picture_name = args.image or tr("the picture chapter 10 draws", "第 10 章画的图像")
say("  {p}: {w} x {h} pixels", "  {p}：{w} x {h} 像素", p=picture_name, w=image.width, h=image.height)
pixel_values, grid_thw = preprocess(image, path)                   # (patches, C*T*p*p), (1, 3)
question = "What is in this picture? 图里有什么？" if args.prompt is None else args.prompt
messages = with_images(question, 1)                                 # [{'role': 'user', 'content': [image, text]}]
rendered = template.render(messages, enable_thinking=False)   # as prompt_ids writes it
short_ids = prompt_ids(tok, messages, template=template)
ids = image_prompt_ids(short_ids, cfg, grid_thw)
say("  {text!r}", "  {text!r}", text=rendered)
t, h, w = grid_thw[0].tolist()
n_written, n_pads, n_ids = len(short_ids), ids.count(image_id), len(ids)
say("  {a} tokens as written; the one <|image_pad|> becomes {n} (grid {g} / {m}^2): {b} tokens",
    "  模板写出 {a} 个词元；那一个 <|image_pad|> 变成 {n} 个（网格 {g} / {m}^2）：共 {b} 个词元",
    a=n_written, n=n_pads, g=f"{t} x {h} x {w}", m=merge, b=n_ids)

# %% [markdown]
# ## 3. The reply, streamed / 流式输出的回复
# One call reads the prompt and the image (prefill: the tower, then the language model over all
# the tokens); then each new token is one small step with the cache, as in chapter 9, at positions
# that go on after the image's. The first token comes after the whole prefill: the time to the
# first token is what a user waits before anything appears.
#
# 一次调用读入提示词和图像（预填充：先是视觉塔，再是语言模型读所有词元）；之后每个新词元都是带缓存的
# 一小步，与第 9 章一样，位置接在图像的位置之后。第一个词元要等整个预填充结束：首词元用时就是用户
# 看到任何输出之前要等的时间。

# %%
section(3, "The reply, streamed", "流式输出的回复")
model = load_model(path)
stats, reply_ids, first, cache = {}, [], None, model.new_cache()
print("  ", end="", flush=True)
start = time.perf_counter()
for piece in generate(model, tok, ids, max_new_tokens=args.max_new_tokens, stats=stats, ids_out=reply_ids,
                      cache=cache, pixel_values=pixel_values, grid_thw=grid_thw):
    if first is None:
        first = time.perf_counter() - start
    shown = piece.replace("\n", "\n  ")                             # the reply's lines, indented
    print(shown, end="", flush=True)
print()
first_token_s = first if first is not None else stats["prefill_s"]
decode_rate = max(stats["new_tokens"] - 1, 1) / max(stats["decode_s"], 1e-9)
say("  time to the first token: {f:.2f} s (prefill of {p} tokens, {n} of them the image's); "
    "then {r} tokens at {d:.1f} tokens/s",
    "  首词元用时：{f:.2f} 秒（预填充 {p} 个词元，其中 {n} 个是图像的）；之后 {r} 个词元，每秒 {d:.1f} 个",
    f=first_token_s, p=stats["prompt_tokens"], n=n_pads, r=stats["new_tokens"], d=decode_rate)
note(ch.threads)
ch.unproven("the reply describes the picture",
            "  (tiny checkpoint: made-up weights: the reply above is made-up tokens, not a description)",
            "  （小检查点：权重是编造的：上面的回复是编造的词元，不是描述）")

# %% [markdown]
# ## 4. The image is read, and the cache goes on after it / 图像被读进去了，缓存接着它往下走
# Two checks that hold on any checkpoint. The same prompt with a blank picture of the same size
# gives other logits: what the model says depends on the pixels. And the reply's last token
# through the cache gives the logits of reading prompt, image and reply again from scratch: the
# cache carries the image's shorter span of positions (its "rope delta") into decoding.
#
# 两个在任何检查点上都成立的检查。同样的提示词配一张同样大小的空白图像，得到的 logits 不同：模型说什么
# 取决于像素。回复的最后一个词元经缓存得到的 logits，等于把提示词、图像和回复从头再读一遍：缓存把图像
# 较短的位置跨度（它的 "rope delta"）带进了解码。

# %%
section(4, "The image is read, and the cache goes on after it", "图像被读进去了，缓存接着它往下走")
blank_pixels, _ = preprocess(Image.new("RGB", image.size, (255, 255, 255)), path)
prompt = torch.tensor([ids])
with_image = model(prompt, last=True, pixel_values=pixel_values, grid_thw=grid_thw)[0, -1]
with_blank = model(prompt, last=True, pixel_values=blank_pixels, grid_thw=grid_thw)[0, -1]
picture_effect = (with_image - with_blank).abs().max().item()
top_image, top_blank = tok.readable(int(with_image.argmax())), tok.readable(int(with_blank.argmax()))
say("  first reply token's logits, this picture vs a blank one: max |difference| {d:.3f}; "
    "top token {a!r} vs {b!r}",
    "  回复第一个词元的 logits，这张图像与空白图像：最大差 {d:.3f}；最可能的词元 {a!r} 与 {b!r}",
    d=picture_effect, a=top_image, b=top_blank)
ch.unproven("the top tokens with and without the picture",
            "  (tiny checkpoint: made-up weights: these tokens mean nothing; the difference shows only that the "
            "pixels reach the logits)", "  （小检查点：权重是编造的：这些词元没有意义；这个差只说明像素影响到了 logits）")
with torch.inference_mode():                                        # generate's cache was made in this mode
    cached = model(torch.tensor([reply_ids[-1:]]), cache=cache, last=True)  # the reply's cache: its last token,
again = model(torch.tensor([ids + reply_ids]), last=True, pixel_values=pixel_values, grid_thw=grid_thw)  # sampled, not read
cache_gap = (cached - again).abs().max().item()
delta = int(cache.delta)                                            # the image's shorter span of positions
shift = f"{'-' if delta < 0 else '+'} {abs(delta)}"
say("  after {n} tokens: rope delta {delta} (a new token's position = its index {shift}); "
    "cached decoding vs reading it all again: max |difference| of the last logits {d:.1e}",
    "  读完 {n} 个词元后：rope delta {delta}（新词元的位置 = 它的序号 {shift}）；带缓存的解码与全部重新读一遍："
    "最后一步 logits 的最大差 {d:.1e}",
    n=cache.length, delta=delta, shift=shift, d=cache_gap)
say("  talk about a picture yourself: python main.py chat --image PATH", "  自己和它聊一张图像：python main.py chat --image PATH")

# %% [markdown]
# ## How to explain it / 怎么讲清楚
# An image enters the prompt as a run of placeholder tokens, one per vector of the vision tower;
# the model reads the tower's vectors there instead of embeddings. Each token has three positions:
# text counts along a line (all three equal, so plain RoPE), the image's tokens sit on their grid
# (row and column), and the text after the image starts one past the image's largest position.
# From then on generation is chapter 9's loop with the cache, shifted by that constant.
#
# 图像以一串占位词元的形式进入提示词，视觉塔的每个向量占一个；模型在那里读视觉塔的向量，而不是嵌入。
# 每个词元有三个位置：文字沿一条线计数（三个相等，所以是普通 RoPE），图像的词元排在自己的网格上（行和列），
# 图像之后的文字从图像最大的位置再加一开始。从这以后，生成就是第 9 章带缓存的循环，只是位置差一个常数。
#
# ## Summary / 小结
# - `with_images(prompt, 1)`, the chat template, `image_prompt_ids`: one pad per merged token.
# - `rope_index(ids, grid_thw, cfg)`: (3, batch, seq); text after an image at max + 1; the cache keeps the delta.
# - `generate(model, tok, ids, pixel_values=..., grid_thw=...)`; `python main.py chat --image PATH`.
#
# - `with_images(prompt, 1)`、对话模板、`image_prompt_ids`：每个合并后的词元一个占位词元。
# - `rope_index(ids, grid_thw, cfg)`：(3, batch, seq)；图像之后的文字从最大位置 + 1 开始；缓存保存这个差。
# - `generate(model, tok, ids, pixel_values=..., grid_thw=...)`；`python main.py chat --image PATH`。

# %%
say("\nExercise for this chapter: 242. Next: chapter 12, reading ahead with the MTP head",
    "\n本章练习：242。下一章：第 12 章，用 MTP 头往前多看一步")
