"""Transformer by Hand: the one command to run.

    python main.py               every chapter in order, on the real Qwen3.5-0.8B if it can be
                                 found or downloaded, else on the built-in tiny checkpoint
    python main.py 3             chapter 3 only (python main.py 3 --help: its own options)
    python main.py download      fetch the model (1.77 GB) into the Hugging Face cache
    python main.py chat          talk with the model (/help lists its commands, /quit leaves)
    python main.py chat --image PATH   ... about a picture (it goes with your first message)
    python main.py 11 --image PATH     chapters 10 and 11 (and the whole course) look at your picture
    python main.py 9 --speculative 3   chapter 9's reply with speculative decoding (chapter 12); chat takes it too
    python main.py 9 --quant int8      chapter 9's reply from int8 (or int4) weights (chapter 13); chat takes it too
    python main.py 9 --mine      chapter 9 with your solved exercises in the model (8, 14 and chat take it too)
    python main.py --plot        every chapter, and their figures as PNGs in out/figures
    options: --tiny  --model PATH  --quant int8|int4  --lang en|zh  --plot  --out DIR  --mine  --debug
    (or the environment: QWEN_TINY=1, QWEN_MODEL=PATH, QWEN_LANG=zh, QWEN_PLOT=1, QWEN_FIGURES=DIR, QWEN_MINE=1)
"""
import os
import runpy
import sys
from pathlib import Path

from engine.cli import CHAPTER_REPLY_TOKENS, banner, model_path, parser, setup, speculative_option
from qwen.lang import QwenError, get_lang, tr

ROOT = Path(__file__).resolve().parent
TINY_CHAT_TOKENS = 32                            # chat's default reply length on the built-in tiny checkpoint
IMAGE_CHAPTERS = (10, 11)                        # the chapters that take --image (the vision tower, an image in the prompt)
REPLY_CHAPTERS = (9, 11)                         # the chapters that take --max-new-tokens
MINE_CHAPTERS = (8, 9, 14)                       # the chapters that take --mine: your parts in the model (practice/mine.py)
TRAINING_CHAPTERS = (15, 16)                     # they train for minutes: each runs on its own (main.py 15)
CHAT_TOKENS = 512                                # and on a real one


def chapters():
    """{number: script} for the chapter scripts present, e.g. {1: ch01_weights.py}."""
    return {int(p.name[2:4]): p for p in sorted(ROOT.glob("ch[0-9][0-9]_*.py"))}


def download(args):
    from engine.cli import not_found
    from engine.hub import DEFAULT_REPO, ModelNotFound, find_model
    repo = args.model or DEFAULT_REPO
    try:
        path = find_model(repo)                           # says what it downloads, with progress bars
    except ModelNotFound as e:
        raise not_found(repo, download=True, error=e) from None
    print(tr("Model ready in {path}\nNext: python main.py", "模型已就绪：{path}\n下一步：python main.py", path=path))


def _figures_env(args):
    """--plot and --out, for the chapters that draw, as QWEN_PLOT and QWEN_FIGURES (the other
    chapters have no figures and no --plot option). Returns the function that puts the
    environment back as it was."""
    saved = {k: os.environ.get(k) for k in ("QWEN_PLOT", "QWEN_FIGURES")}
    if args.plot:
        os.environ["QWEN_PLOT"] = "1"
    if args.out:
        os.environ["QWEN_FIGURES"] = args.out

    def restore():
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return restore


def run_chapter(script):
    """Run one chapter script in this process. Its thread count (torch.set_num_threads, engine/threads.py)
    and autograd's switch (chapters 8-13 turn it off, chapter 14 needs it) are put back afterwards: the
    next chapter starts from the same settings as if it ran on its own."""
    import torch

    before, grad = torch.get_num_threads(), torch.is_grad_enabled()
    try:
        runpy.run_path(str(script), run_name="__main__")
    finally:
        torch.set_num_threads(before)
        torch.set_grad_enabled(grad)


def run_chapters(args, numbers):
    from qwen.config import Config

    from engine.tiny import is_tiny

    path = model_path(args)
    cfg = Config.load(path)
    banner(cfg)                                          # once per run; the chapters do not repeat it
    found = chapters()
    restore = _figures_env(args)
    try:
        for n in numbers:
            script = found[n]
            print("\n" + "#" * 78 + "\n# " + script.name + "\n" + "#" * 78)
            sys.argv = [str(script), "--model", str(path), "--lang", get_lang()] + (["--debug"] if args.debug else [])
            sys.argv += args.rest                        # a chapter's own options (--prompt, --text ...)
            if n in REPLY_CHAPTERS and args.max_new_tokens:   # else the chapter's own default, as when run alone
                sys.argv += ["--max-new-tokens", str(args.max_new_tokens)]
            if n in IMAGE_CHAPTERS and args.image is not None:
                sys.argv += ["--image", args.image]
            if n in MINE_CHAPTERS and args.mine:
                sys.argv += ["--mine"]
            if n in (9, 12) and args.speculative is not None:
                sys.argv += ["--speculative", str(args.speculative)]
            if n == 9 and args.quant is not None:
                sys.argv += ["--quant", args.quant]
            if n == 9 and args.temperature is not None:
                sys.argv += ["--temperature", str(args.temperature)]
            try:
                run_chapter(script)
            except SystemExit as stop:           # a chapter this checkpoint cannot run said why and stopped
                if stop.code:                    # (SystemExit(0)); the course goes on to the next chapter
                    raise
    finally:
        restore()
    print("\n" + tr("Done: chapter(s) {ns} on {path}{tiny}.\nPractice: python practice/judge.py",
                   "完成：第 {ns} 章，模型 {path}{tiny}。\n练习：python practice/judge.py",
                   ns=tr(", ", "、").join(map(str, numbers)), path=path,
                   tiny=tr(" (the built-in tiny checkpoint: made-up numbers)", "（内置小检查点：数值是编造的）")
                   if is_tiny(cfg) else ""))


def _chapter_help(p, argv):
    """`main.py N --help`: chapter N's own help (its options are the ones main.py hands on), in place of
    main.py's, which lists none of them. Returns if there is no help to give or no chapter named."""
    if not {"-h", "--help"} & set(argv):
        return
    known, _ = p.parse_known_args([a for a in argv if a not in ("-h", "--help")])
    found = chapters()
    if known.what.isdigit() and int(known.what) in found:
        sys.argv = [str(found[int(known.what)]), "--help", *(["--lang", known.lang] if known.lang else [])]
        run_chapter(found[int(known.what)])      # argparse prints the help and exits


def mine_parts():
    """--mine: the learner's solved exercises, put into the model (practice/mine.py)."""
    from practice.mine import put_in
    return put_in


def main(argv=None):
    p = parser("Transformer by Hand: rebuild Qwen3.5 one part at a time, on its real weights.",
               "手搓 Transformer：在真实权重上，一个部件一个部件地重建 Qwen3.5。")
    p.add_argument("what", nargs="?", default="all",
                   help=tr("a chapter number, 'download', 'chat', 'practice' (the exercises in the browser), "
                           "or nothing for every chapter but the trainings (15, 16)",
                           "章节号、download、chat、practice（在浏览器里做练习），或留空运行除训练（15、16）外的所有章节"))
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help=tr("longest reply in chat and chapters 9 and 11 (default {c} / {n}; chat on the tiny checkpoint: {t})",
                           "chat 和第 9、11 章回复的最大词元数（默认 {c} / {n}；小检查点上的 chat：{t}）",
                           c=CHAT_TOKENS, n=CHAPTER_REPLY_TOKENS, t=TINY_CHAT_TOKENS))
    p.add_argument("--image", metavar="PATH", default=None,
                   help=tr("a picture: chat about it (it goes with your first message), or chapters 10 and 11 look at it",
                           "一张图片：就它对话（它随你的第一条消息一起发送），或者让第 10、11 章看它"))
    p.add_argument("--speculative", metavar="K", default=None,
                   help=tr("speculative decoding in chat and chapters 9 and 12: the MTP head drafts K tokens a step "
                           "and the model verifies them in one forward pass; greedy replies are the plain greedy ones, "
                           "token for token, in fp32 (in bf16 a near-tie can flip), sampled ones keep the sampling "
                           "distribution (default: off; chapter 12 says why and measures it)",
                           "chat 和第 9、12 章的推测解码：MTP 头每步起草 K 个词元，模型用一次前向计算验证它们；"
                           "fp32 下贪心回复与普通贪心解码逐词元相同（bf16 下接近并列的词元可能翻转），采样回复保持采样分布"
                           "（默认：关闭；第 12 章说明原因并测量它）"))
    p.add_argument("--temperature", type=float, metavar="T", default=None,
                   help=tr("sampling temperature in chat and chapter 9's reply, with or without --speculative "
                           "(chat's default: 0.7, with top-k 20 and top-p 0.8; chapter 9's: 0, greedy)",
                           "chat 和第 9 章回复的采样温度，加不加 --speculative 都可以（chat 默认 0.7，配合 top-k 20 "
                           "和 top-p 0.8；第 9 章默认 0，即贪心）"))
    p.add_argument("--quant", metavar="MODE", default=None,
                   help=tr("int8 or int4: chat and chapter 9 with weight-only quantized projections and output layer "
                           "(qwen/quant.py, chapter 13; default: off, fp32)",
                           "int8 或 int4：chat 和第 9 章使用只量化权重的投影和输出层（qwen/quant.py，第 13 章；"
                           "默认：关闭，fp32）"))
    p.add_argument("--mine", action="store_true",
                   help=tr("chat and chapters 8 and 9 build the model with your solved exercises (those the judge "
                           "passes) in place of the course's parts",
                           "chat 和第 8、9 章用你解出的练习（评测通过的）代替课程的部件来搭建模型"))
    p.add_argument("--plot", action="store_true",
                   help=tr("also draw each chapter's figures, as PNGs (or QWEN_PLOT=1; needs matplotlib)",
                           "同时画出各章的图，写成 PNG（也可设 QWEN_PLOT=1；需要 matplotlib）"))
    p.add_argument("--out", metavar="DIR", default=None,
                   help=tr("folder for the figures (default: $QWEN_FIGURES, else out/figures)",
                           "图片保存的文件夹（默认：$QWEN_FIGURES，否则 out/figures）"))
    p.epilog = tr("A chapter's own options: python main.py 9 --help", "章节自己的选项：python main.py 9 --help")
    _chapter_help(p, sys.argv[1:] if argv is None else list(argv))
    args = setup(p, argv, rest=True)
    if args.max_new_tokens is not None and args.max_new_tokens < 1:   # 0 read as "the default" (512 in chat),
        raise QwenError("--max-new-tokens must be at least 1.",          # and chat replied nothing to -3
                        "--max-new-tokens 至少为 1。")
    args.speculative = speculative_option(args.speculative)             # before any model is read
    if args.quant is not None:
        from engine.quantized import check_mode
        check_mode(args.quant, args.speculative, args.mine)             # one line, before any model is read
    if args.temperature is not None:
        from qwen.generate import check_sampling
        check_sampling(args.temperature)                                # nan, -1: one line, before any model is read
        if args.what not in ("all", "chat", "9"):
            p.error(tr("--temperature is for chat and chapter 9, not {w}", "--temperature 用于 chat 和第 9 章，不用于 {w}",
                       w=args.what))
    found = chapters()
    if args.what == "practice":                  # the practice page: the judge's own --web, with its options
        from practice import judge
        forward = ["--web", *(["--tiny"] if args.tiny else []), *(["--model", args.model] if args.model else []),
                   *(["--lang", args.lang] if args.lang else []), *(["--debug"] if args.debug else []), *args.rest]
        code = judge.main(forward)
        if code:
            raise SystemExit(code)               # the judge's exit code (2: a usage error)
        return 0
    if args.rest and args.what in ("chat", "download"):                  # not a chapter's option put first
        p.error(tr("unrecognized arguments: {a} ({w} takes main.py's own options: python main.py --help)",
                   "无法识别的参数：{a}（{w} 只接受 main.py 自己的选项：python main.py --help）",
                   a=" ".join(args.rest), w=args.what))
    if args.rest and not (args.what.isdigit() and int(args.what) in found):
        p.error(tr("unrecognized arguments: {a} (a chapter's own options go after its number, "
                   "e.g. python main.py 9 --prompt \"...\")",
                   "无法识别的参数：{a}（章节自己的选项写在章节号后面，例如 python main.py 9 --prompt \"...\"）",
                   a=" ".join(args.rest)))
    takes_image = args.what in ("chat", "all") or args.what.isdigit() and int(args.what) in IMAGE_CHAPTERS
    if args.image is not None and not takes_image:
        raise QwenError("--image goes with chat or chapters 10 and 11: python main.py chat --image PATH, "
                        "python main.py 11 --image PATH",
                        "--image 只用于 chat 或第 10、11 章：python main.py chat --image PATH、"
                        "python main.py 11 --image PATH")
    if args.what == "chat" and args.image is not None and args.speculative is not None:
        raise QwenError("Speculative decoding reads text prompts only: chat with --image or with --speculative, "
                        "not both.", "推测解码只读纯文本提示词：chat 用 --image 或 --speculative，不能同时用。")
    if args.mine and args.what not in ("all", "chat") + tuple(map(str, MINE_CHAPTERS)):
        p.error(tr("--mine is for chat and chapters {c} (e.g. python main.py 9 --mine), not {w}",
                   "--mine 用于 chat 和第 {c} 章（例如 python main.py 9 --mine），不用于 {w}",
                   c=tr(", ", "、").join(map(str, MINE_CHAPTERS)), w=args.what))
    if args.speculative is not None and args.what not in ("all", "chat", "9", "12"):
        p.error(tr("--speculative is for chat and chapters 9 and 12 (e.g. python main.py 9 --speculative 3), not {w}",
                   "--speculative 用于 chat 和第 9、12 章（例如 python main.py 9 --speculative 3），不用于 {w}",
                   w=args.what))
    if args.quant is not None and args.what not in ("all", "chat", "9"):
        p.error(tr("--quant is for chat and chapter 9 (e.g. python main.py 9 --quant int8), not {w}",
                   "--quant 用于 chat 和第 9 章（例如 python main.py 9 --quant int8），不用于 {w}", w=args.what))
    if args.what == "download":
        return download(args)
    if args.what == "chat":
        from engine.chat import chat_loop
        from qwen.config import Config
        from engine.tiny import is_tiny
        path = model_path(args)
        cfg = Config.load(path)
        banner(cfg)
        limit = args.max_new_tokens
        if limit is None and is_tiny(cfg):       # made-up tokens: 512 of them is a minute of noise per turn
            limit = TINY_CHAT_TOKENS
            print(tr("The tiny checkpoint's replies are made-up tokens: each stops after {n} "
                     "(--max-new-tokens to change it).",
                     "小检查点的回复是编造的词元：每次回复到 {n} 个词元为止（用 --max-new-tokens 修改）。",
                     n=limit))
        from engine import threads
        used = threads.use(threads.choose(small=is_tiny(cfg)))
        print(tr("Speeds below are timed with {c}.", "下面的速度计时使用 {c}。", c=used.text()))
        return chat_loop(path, max_new_tokens=limit or CHAT_TOKENS, image=args.image, speculative=args.speculative,
                         quant=args.quant, parts=mine_parts() if args.mine else None,
                         temperature=args.temperature)
    if args.what == "all":
        run_chapters(args, sorted(n for n in found if n not in TRAINING_CHAPTERS))
        training = [n for n in sorted(found) if n in TRAINING_CHAPTERS]
        if training:
            print(tr("Training (a few minutes each, on their own): {c}", "训练（每章几分钟，单独运行）：{c}",
                     c=tr(", ", "、").join(f"python main.py {n}" for n in training)))
        return None
    if args.what.isdigit() and int(args.what) in found:
        return run_chapters(args, [int(args.what)])
    p.exit(2, tr("main.py: error: unknown chapter {what!r}; available: {have}, 'download' or 'chat'\n",
                "main.py：错误：没有第 {what} 章；可用的有：{have}、download 或 chat\n",
                what=args.what, have=tr(", ", "、").join(map(str, sorted(found)))))


if __name__ == "__main__":
    main()                                       # a QwenError prints as one line (engine.cli)
