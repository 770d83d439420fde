"""Qwen3.5-0.8B rebuilt in plain PyTorch: the lesson, one file per concept, lowest first.

Each file imports only the files above it in this list (tests/test_structure.py checks it):
    lang.py       every learner-facing sentence, in English and Chinese
    files.py      opening a checkpoint's files safely
    config.py     ch01   config.json: the numbers that fix every shape
    weights.py    ch01   the checkpoint's tensors, read lazily from safetensors; load() strictly
    tokenizer.py  ch02   byte-level BPE, text to token ids and back
    embedding.py  ch02   token ids to vectors, and the tied output's scores
    norm.py       ch03   RMSNorm, the gated RMSNorm, l2norm
    rope.py       ch04   rotary positions (and the 3D positions of an image)
    linear.py     ch05   the one product every projection computes: the engine's kernel seam
    mlp.py        ch05   the SwiGLU MLP
    cache.py      ch06   what each layer keeps between calls
    attention.py  ch06   gated full attention with grouped-query heads
    deltanet.py   ch07   Gated DeltaNet: the linear attention, recurrent and chunked
    image.py      ch10   an image file to the rows the vision tower reads
    vision.py     ch10   the vision tower
    model.py      ch08   the whole model from these parts (the tower included, so it comes after it)
    generate.py   ch09   sampling, stop tokens, the chat template, streamed text
    mtp.py        ch12   the multi-token-prediction head and speculative decoding
    quant.py      ch13   int8 and 4-bit weights
    train.py      ch14   the next-token loss, a backward by hand, AdamW, clipping, the schedule
    pretrain.py   ch15   training from a random start: a small config, the init, the batches, the step
    lora.py       ch16   LoRA by hand: low-rank adapters on the frozen model, PEFT's files, merging

Everything else (the chapters' options and banners, the download, the tiny checkpoint, chat, plots,
speed) is the engine, in engine/: it imports this package, and this package never imports it.
"""
