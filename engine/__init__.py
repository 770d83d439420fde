"""The engine: what runs the lesson fast and conveniently, beside it and never inside it.

It imports `qwen` (the lesson); `qwen` never imports it. Where it changes how the model computes, it
does so through the lesson's declared seams (qwen/linear.py's product kernel, qwen/quant.py's kernel), not by
patching.

    cli.py        what every chapter shares: chapter(), options, banners, titles, printed lines
    hub.py        where the checkpoint is, and the download
    tiny.py       the built-in tiny checkpoint (the real format, made-up numbers)
    known.py      what the real model shows, beside a tiny-checkpoint figure
    plots.py      the chapters' figures
    pictures.py   the picture chapters 10 and 11 look at
    chat.py       `python main.py chat`
    threads.py    how many CPU threads torch uses
    products.py   the kernel behind qwen/linear.py: faster fp32 products of one and a few rows
    packed.py     its path for bf16 on CPUs with bf16 arithmetic: each weight packed once for oneDNN
    upcast.py     its path for long bf16 inputs on CPUs without bf16 arithmetic
    quantized.py  torch's weight-only kernels behind qwen/quant.py, and quantizing while loading
"""
