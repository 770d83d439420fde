"""Qwen3.5-0.8B rebuilt in plain PyTorch: the lesson.

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

Below them: lang.py (every learner-facing sentence in English and Chinese), files.py (opening a
checkpoint's files safely) and linear.py (the one product every projection computes: the seam the
engine's faster kernels plug into). Everything else (the chapters' options and banners, the
download, the tiny checkpoint, chat, plots, speed) is the engine, in engine/: it imports this
package, and this package never imports it.
"""
