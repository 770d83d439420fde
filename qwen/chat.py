"""`python main.py chat`: talk with the model in the terminal, through the course's own generation code.

Each turn is sent through the checkpoint's chat template; the reply is streamed as it is
generated (sampled: temperature 0.7, top-k 20, top-p 0.8, Qwen's suggestion without thinking).
/reset clears the conversation and the cache; Ctrl-C or Ctrl-D leaves.
"""
import sys

from qwen.lang import tr


def chat_loop(path, max_new_tokens=512, think=False, read=input):
    import torch

    from qwen.cli import size
    from qwen.generate import Chat
    from qwen.model import load_model
    from qwen.tokenizer import Tokenizer

    torch.set_grad_enabled(False)
    print(tr("Loading {path} ...", "正在加载 {path} ……", path=path), flush=True)
    model = load_model(path)
    chat = Chat(model, Tokenizer.load(path), enable_thinking=think, temperature=0.7, top_k=20, top_p=0.8, seed=0)
    print(tr("Type a message and press Enter. /reset clears the conversation and the cache; Ctrl-C leaves.",
             "输入消息后按回车。/reset 清空对话和缓存；Ctrl-C 退出。"))
    try:
        while True:
            try:
                line = read("> ").strip()
            except EOFError:
                break
            if not line:
                continue
            if line == "/reset":
                chat.reset()
                print(tr("(conversation and cache cleared)", "（对话和缓存已清空）"))
                continue
            stats = {}
            for piece in chat.say(line, max_new_tokens=max_new_tokens, stats=stats):
                print(piece, end="", flush=True)
            print()
            # reading the prompt (prefill) and writing the reply (decode) are timed apart, as in ch09:
            # one rate over both would mostly measure the prompt's length
            print(tr("  [{n} tokens; read {p} prompt tokens in {ps:.2f} s, then {d:.1f} tokens/s; cache {t} tokens, "
                     "{b}{again}]",
                     "  [{n} 个词元；用 {ps:.2f} 秒读入提示词的 {p} 个词元，然后 {d:.1f} 词元/秒；缓存 {t} 个词元，{b}{again}]",
                     n=stats["new_tokens"], p=stats["prompt_tokens"], ps=stats["prefill_s"],
                     d=max(stats["new_tokens"] - 1, 1) / max(stats["decode_s"], 1e-9),
                     t=chat.cache.length, b=size(chat.cache.nbytes),
                     again=tr("; history read again", "；历史重新读取") if chat.reused == 0 and len(chat.messages) > 2
                     else ""), file=sys.stderr)
    except KeyboardInterrupt:
        pass
    print(tr("\nBye.", "\n再见。"))
