"""`python main.py chat`: talk with the model in the terminal, through the course's own generation code.

Each turn is sent through the checkpoint's chat template; the reply is streamed as it is
generated (sampled: temperature 0.7, top-k 20, top-p 0.8, Qwen's suggestion without thinking;
--temperature 0 for greedy replies).
Only what no kept cache has read is read again (engine/conversation.py Chat); the line after each reply
says how many of the prompt's tokens were reused.

Commands: /help, /reset (clears the conversation and the cache), /quit. Ctrl-C during a reply
stops that reply: the part already shown stays in the conversation as the model's answer (with
nothing shown yet, the message is taken back), and the chat goes on. Ctrl-C or Ctrl-D at the
prompt leaves. Special-token text in a message ('<|im_end|>') is read as plain text.

`--image PATH`: the picture is preprocessed (qwen/image.py) before the model is loaded, so a file
that is not an image costs one line and no wait, and goes with the first message (again with the
first one after /reset): its pad tokens, one per merged 2 x 2 block of patches, in that message.
"""
import sys

from qwen.lang import QwenError, tr

COMMANDS = ("/help", "/reset", "/quit")


def help_text():
    return tr("Commands: /help this list; /reset clears the conversation and the cache; /quit leaves "
              "(so do Ctrl-D and Ctrl-C while it waits for your message).\n"
              "Ctrl-C during a reply stops it: the part shown stays in the conversation.\n"
              "Text such as <|im_end|> in your message is read as plain text, not as a special token.",
              "命令：/help 显示本列表；/reset 清空对话和缓存；/quit 退出（等待输入消息时按 Ctrl-D 或 Ctrl-C 也可以）。\n"
              "回复过程中按 Ctrl-C 会停止这次回复：已显示的部分留在对话里。\n"
              "消息里的 <|im_end|> 之类的文字按普通文本读入，而不是特殊词元。")


SAMPLING = dict(temperature=0.7, top_k=20, top_p=0.8, seed=0)     # Qwen's suggestion without thinking


def chat_loop(path, max_new_tokens=512, think=False, read=input, image=None, speculative=None, temperature=None,
              quant=None, parts=None):
    """image: a picture that goes with the first message (chapter 11). speculative=k: the MTP head drafts
    k tokens a step (qwen/mtp.py, chapter 12), with the same sampling (the accept / reject rule keeps
    its distribution). temperature: None for Qwen's 0.7 (top-k 20, top-p 0.8), 0 for greedy replies.
    quant: "int8" or "int4", the weights quantized (qwen/quant.py, chapter 13). parts: a function (model, probe ids)
    that puts other parts into the model (main.py --mine passes practice/mine.py's put_in)."""
    import torch

    from engine.products import fast

    with torch.no_grad(), fast():  # for the chat only: a notebook (or a test) that called it goes on with gradients
        return _chat_loop(path, max_new_tokens, think, read, image, speculative, temperature, quant, parts)


def load_chat_image(path, image):
    """(pixel_values, grid_thw) of the picture `image` for the checkpoint in `path`: one line if it
    is no image (qwen/image.py load_image) or the checkpoint has no vision tower."""
    from qwen.config import Config
    from qwen.vision import preprocess

    Config.load(path).image_tokens()                                  # a text-only export: one line
    return preprocess(image, path)


def _chat_loop(path, max_new_tokens, think, read, image=None, speculative=None, temperature=None, quant=None,
               parts=None):
    import torch
    from engine.conversation import Chat
    from qwen.model import load_model
    from engine.tokens import load_tokenizer

    picture = None if image is None else load_chat_image(path, image)
    print(tr("Loading {path} ...", "正在加载 {path} ……", path=path), flush=True)
    if quant is None:
        model = load_model(path, dtype=torch.float32, vision=picture is not None)   # the tower only for a picture
    else:                                                          # read and quantized a block of rows at a time
        from engine.cli import size
        from engine.quantized import load_quantized, weight_bytes
        model = load_quantized(path, quant, vision=picture is not None)
        before, stored = model.stored
        print(tr("Weights quantized to {q} (chapter 13): {a} in {d} -> {b}.", "权重已量化为 {q}（第 13 章）：{d} 的 {a} -> {b}。",
                 q=quant, a=size(before), d=stored, b=size(weight_bytes(model))), flush=True)
    if picture is not None and model.visual is None:               # a vision_config, no model.visual.* tensors
        raise QwenError("{path} has no vision tower (model.visual.* tensors), so --image cannot be read. Use the "
                        "multimodal checkpoint (Qwen/Qwen3.5-0.8B), or chat without --image.",
                        "{path} 没有视觉塔（model.visual.* 张量），所以读不了 --image。请使用多模态检查点"
                        "（Qwen/Qwen3.5-0.8B），或者不带 --image 对话。", path=path)
    tok = load_tokenizer(path)
    if parts is not None:                                          # probed on the chat template's first words
        parts(model, tok.encode("Hello! 你好！"))
    sampling = SAMPLING if temperature is None else {**SAMPLING, "temperature": temperature}
    if speculative is None:
        chat = Chat(model, tok, enable_thinking=think, **sampling)
    else:
        from qwen.mtp import check_speculative
        check_speculative(model, speculative)                         # no MTP head: one line, before the first message
        chat = Chat(model, tok, enable_thinking=think, speculative=speculative, **sampling)
        if sampling["temperature"] > 0:
            print(tr("Speculative decoding: the MTP head drafts {k} tokens a step and the model verifies them; replies "
                     "are sampled as without --speculative (temperature {t}: the accept / reject rule keeps that "
                     "distribution).",
                     "推测解码：MTP 头每步起草 {k} 个词元，由模型验证；回复照常采样（温度 {t}：接受 / 拒绝规则"
                     "保持这个分布不变）。", k=speculative, t=sampling["temperature"]))
        else:
            print(tr("Speculative decoding: the MTP head drafts {k} tokens a step and the model verifies them; replies "
                     "are greedy (temperature 0), the same tokens as without --speculative in fp32.",
                     "推测解码：MTP 头每步起草 {k} 个词元，由模型验证；回复用贪心解码（温度 0），fp32 下与不加 "
                     "--speculative 时逐词元相同。", k=speculative))
    if picture is not None:
        _, h, w = picture[1][0].tolist()
        print(tr("Image {file}: {h} x {w} patches, {n} tokens; it goes with your first message.",
                 "图像 {file}：{h} x {w} 个图块，{n} 个词元；它随你的第一条消息一起发送。",
                 file=image, h=h, w=w, n=h * w // model.cfg.image_tokens()[1] ** 2))
    print(tr("Type a message and press Enter. /help lists the commands; /quit leaves.",
             "输入消息后按回车。/help 列出命令；/quit 退出。"))
    try:
        while True:
            try:
                line = read("> ").strip()
            except EOFError:
                break
            if not line:
                continue
            if line.startswith("/") and " " not in line:             # a command, never sent to the model
                if line == "/quit":
                    break
                if line == "/reset":
                    chat.reset()
                    if picture is None:
                        print(tr("(conversation and cache cleared)", "（对话和缓存已清空）"))
                    else:                                             # the picture is sent again: say so
                        print(tr("(conversation and cache cleared; the image goes with your next message)",
                                 "（对话和缓存已清空；图像随你的下一条消息再发送一次）"))
                elif line == "/help":
                    print(help_text())
                else:
                    print(tr("Unknown command {c}: the commands are {all}.", "没有 {c} 这个命令：可用的命令是 {all}。",
                             c=line, all=tr(", ", "、").join(COMMANDS)))
                continue
            image_args = {} if picture is None or chat.messages else dict(pixel_values=picture[0], grid_thw=picture[1])
            reply(chat, line, max_new_tokens, **image_args)
    except KeyboardInterrupt:                                         # at the prompt: leave
        pass
    print(tr("\nBye.", "\n再见。"))


def reply(chat, line, max_new_tokens, **image):
    """One turn: the reply streamed, then one line of what it cost (or of how it was stopped).
    image: pixel_values and grid_thw of a picture sent with this message (Chat.say)."""
    special = sorted({t for t in chat.tok.special if t in line})
    if special:
        print(tr("  ({t}: read as plain text, not as special tokens)", "  （{t}：按普通文本读入，不是特殊词元）",
                 t=" ".join(special)), file=sys.stderr)
    stats = {}
    pieces = chat.say(line, max_new_tokens=max_new_tokens, stats=stats, **image)
    try:
        for piece in pieces:
            print(piece, end="", flush=True)
    except KeyboardInterrupt:                                         # in the model, or while printing
        pieces.close()
        print()
        kept = chat.messages and chat.messages[-1]["role"] == "assistant"
        print(tr("  [reply stopped (Ctrl-C): {what}]",
                 "  [回复已停止（Ctrl-C）：{what}]",
                 what=tr("the part shown stays in the conversation", "已显示的部分留在对话里") if kept
                 else tr("nothing was shown, so the message was taken back", "还没有显示任何内容，所以这条消息已撤回")),
              file=sys.stderr)
        return
    print()
    print(speed_line(chat, stats), file=sys.stderr)


def speed_line(chat, stats):
    """Reading the prompt (prefill) and writing the reply (decode) timed apart, as in ch09: one rate
    over both would mostly measure the prompt's length. And how much of the prompt a kept cache had read."""
    from engine.cli import size
    n = stats["new_tokens"]                                   # the first comes from the prefill: n - 1 decode steps
    then = (tr("then {d:.1f} tokens/s", "然后 {d:.1f} 词元/秒", d=(n - 1) / max(stats["decode_s"], 1e-9)) if n > 1
            else tr("no decode step", "没有解码步骤"))
    return tr("  [{n} tokens; reused {r} of {m} prompt tokens, read {p} in {ps:.2f} s, {then}; "
              "cache {t} tokens, {b}]",
              "  [{n} 个词元；提示词的 {m} 个词元中复用了 {r} 个，用 {ps:.2f} 秒读入 {p} 个，{then}；"
              "缓存 {t} 个词元，{b}]",
              n=n, r=chat.reused, m=chat.prompt_tokens, p=stats["prompt_tokens"], ps=stats["prefill_s"],
              then=then, t=chat.cache.length, b=size(chat.cache.nbytes)) + (
        tr("  [speculative: {a} of {d} drafts accepted, {r:.2f} tokens per verify pass]",
           "  [推测解码：{d} 个草稿中接受 {a} 个，每次验证 {r:.2f} 个词元]", a=stats["accepted"], d=stats["drafted"],
           r=max(stats["new_tokens"] - 1, 0) / max(stats["rounds"], 1)) if stats.get("rounds") is not None else "")
