"""Benchmark of the chat's cache reuse across turns (engine/conversation.py Chat): five turns, side by side.

Qwen3.5's chat template writes earlier replies without their <think> block, so a turn's prompt
parts from the previous one right after '<|im_start|>assistant\\n'; without reuse every turn
reads the whole conversation again. With it, a copy of the cache kept at that point continues.
Both run the same greedy five-turn chat (the replies are checked equal, token for token) in one
process, alternately (each goes first in every other round), `--rounds` times; per turn, the
prompt tokens read and the best prefill time.

    python bench/bench_chat.py [--full] [--keep DIR] [--new-tokens 16] [--rounds 3] [--threads N]

Keeping the copy costs one more forward call a turn (the prompt is read in two parts), and on a
CPU every call reads all the weights once: about a decode step. So the time saved is the tokens
not read again minus one such step, and it grows with the conversation, not the token count.

Without --full: the built-in tiny checkpoint (real format, made-up numbers: the token counts
are what a real chat reads; its seconds are not the real model's). --full: a full-size checkpoint
with the real 0.8B inventory and random values (bench/common.py), read in fp32.
"""
import argparse
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import ENV, ROOT, full_checkpoint  # noqa: E402

MESSAGES = ("Hi there! Who are you?", "What is 2+2? Answer in one word.", "Tell me one fact about cats.",
            "And one about dogs?", "Thanks. Which of the two do you like more, and why?")

CHILD = r"""
import json, sys, time, torch
from engine.conversation import Chat
from qwen.model import load_model
from engine.tokens import load_tokenizer
path, new, rounds, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
if threads:
    torch.set_num_threads(threads)
torch.set_grad_enabled(False)
model, tok = load_model(path, vision=False), load_tokenizer(path)
messages = json.loads(sys.argv[5])
best = {}
for r in range(rounds):
    for reuse in ((False, True) if r % 2 == 0 else (True, False)):   # each goes first in turn
        chat = Chat(model, tok, reuse=reuse, temperature=0.0)
        for turn, text in enumerate(messages, 1):
            stats = {}
            reply = "".join(chat.say(text, max_new_tokens=new, stats=stats))
            row = best.setdefault((reuse, turn), {"prefill_s": float("inf")})
            row.update(read=stats["prompt_tokens"], prompt=chat.prompt_tokens, reused=chat.reused, reply=reply,
                       prefill_s=min(row["prefill_s"], stats["prefill_s"]))
print(json.dumps([[reuse, turn, row] for (reuse, turn), row in best.items()]))
"""


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--full", action="store_true", help="a full-size checkpoint (1.75 GB, written once with --keep)")
    p.add_argument("--keep", help="folder for the full-size checkpoint, reused if already there")
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's own)")
    args = p.parse_args()
    if args.full:
        path = full_checkpoint(args.keep)
    else:
        sys.path.insert(0, str(ROOT))
        from engine.tiny import tiny_model_path
        path = tiny_model_path()
    import json
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), str(args.new_tokens), str(args.rounds),
                          str(args.threads), json.dumps(MESSAGES)], cwd=ROOT, env=ENV, check=True,
                         capture_output=True, text=True).stdout
    rows = {(reuse, turn): row for reuse, turn, row in json.loads(out.splitlines()[-1])}
    print(f"{path}: 5 turns, greedy, {args.new_tokens} new tokens a turn, best of {args.rounds} rounds; "
          f"load: {os.getloadavg()[0]:.2f} (1 min)")
    print(f"{'turn':>4} {'prompt':>7} {'read without':>13} {'read with':>10} {'reused':>7} "
          f"{'prefill s without':>18} {'prefill s with':>15} {'ratio':>6} {'same reply':>11}")
    total = [0, 0, 0.0, 0.0]
    for turn in range(1, len(MESSAGES) + 1):
        a, b = rows[(False, turn)], rows[(True, turn)]
        same = a["reply"] == b["reply"]
        print(f"{turn:>4} {b['prompt']:>7} {a['read']:>13} {b['read']:>10} {b['reused']:>7} "
              f"{a['prefill_s']:>18.3f} {b['prefill_s']:>15.3f} {a['prefill_s'] / b['prefill_s']:>6.2f} {str(same):>11}")
        if turn >= 2:
            total = [total[0] + a["read"], total[1] + b["read"], total[2] + a["prefill_s"], total[3] + b["prefill_s"]]
    print(f"turns 2-5: read {total[0]} without, {total[1]} with ({total[1] / total[0]:.0%}); prefill "
          f"{total[2]:.3f} s without, {total[3]:.3f} s with (x{total[2] / total[3]:.2f} faster)")


if __name__ == "__main__":
    main()
