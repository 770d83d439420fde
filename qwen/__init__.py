"""Qwen3.5-0.8B rebuilt in plain PyTorch: the lesson, and the course's plumbing around it.

The lesson: the model's parts, in chapter order (what the chapters teach, and what to read):
    weights.py    ch01   the checkpoint's tensors, read lazily from safetensors; load() strictly
    config.py     ch01   config.json: the numbers that fix every shape
    tokenizer.py  ch02   byte-level BPE, text to token ids and back
    embedding.py  ch02   token ids to vectors, and the tied output's scores
    norm.py       ch03   RMSNorm, the gated RMSNorm, l2norm
    rope.py       ch04   rotary positions (and the 3D positions of an image)
    mlp.py        ch05   the SwiGLU MLP
    attention.py  ch06   gated full attention with grouped-query heads
    deltanet.py   ch07   Gated DeltaNet: the linear attention, recurrent and chunked
    model.py      ch08   the whole model from these parts
    cache.py      ch09   what each layer keeps between calls
    generate.py   ch09   sampling, stop tokens, the chat template, streamed text
    image.py      ch10   an image file to the rows the vision tower reads
    vision.py     ch10   the vision tower
    mtp.py        ch12   the multi-token-prediction head and speculative decoding
    quant.py      ch13   int8 and 4-bit weights

The course's plumbing (needed to run the chapters, not part of the model):
    cli.py        options, banners, section titles, printed claims, errors
    lang.py       languages: every learner-facing sentence in English and Chinese
    files.py      opening a checkpoint's files safely, and which files make one
    hub.py        finding the model, and the download
    tiny.py       the built-in tiny checkpoint (the real format, made-up numbers)
    known.py      what the real model shows, beside a tiny-checkpoint figure
    plots.py      the chapters' figures
    pictures.py   the picture chapters 10 and 11 draw
    chat.py       `python main.py chat`
    threads.py    how many CPU threads torch uses
    upcast.py     a faster bf16 prompt pass on CPUs without bf16 matmul
    products.py   faster fp32 products of one and a few rows, for generation
    practice.py   judge glue: check() from a notebook in any folder
    mine.py       judge glue: --mine, the learner's solved parts in the model
"""
