"""Benchmark of chapter 10: preprocessing + the vision tower for one 448 x 448 image, ours against
transformers', on the full-size tower (Qwen3.5-0.8B's 153 `model.visual.*` tensors: real names,
shapes and dtypes, random values, written to a temp folder with the real config.json).

  time          qwen.vision.preprocess + VisionModel against Qwen2VLImageProcessorPil +
                Qwen3_5VisionModel (its default attention, sdpa), both in one process with the
                same torch threads, run alternately `--rounds` times after one warm-up each; the
                best run of each counts (side by side: both see the same machine);
  peak extra    what one image adds to the process's peak RSS, on the first call in a fresh
  memory        process (each side its own, `--repeat` times, alternated; the largest counts):
                the kernel's high-water mark is reset (/proc/self/clear_refs) after the tower is
                loaded, its weights read once (ours maps bf16 weights from the file, so their
                pages would otherwise arrive during the first call) and the image opened, and
                read after its tokens are out;
  fidelity      max |ours - transformers| / max |transformers| of the image tokens.

  prefill       a chat prompt with the same image (`--parts prefill`): the picture preprocessed, the
                tower, and the whole language model reading the prompt (216 tokens, 196 of them the
                image's), the last position's logits out, as generation's first step. On the full-size
                checkpoint (common.full_checkpoint: all 488 tensors, random values); each side in its
                own fresh processes (two 0.8B models in one process would be too large), alternated
                `--repeat` times, each the best of `--rounds` after a warm-up. transformers:
                Qwen3_5ForConditionalGeneration with logits_to_keep=1, as its generate prefills.

Both sides read the same tower from the same file, converted to the compute dtype once at load
(fp32, then bf16); loading is not timed. Neither side loads the language model: the tower alone
is what is measured (the whole model would put two 3.5 GB fp32 copies on the machine).

    python bench/bench_vision.py [--keep DIR] [--threads N] [--dtypes float32,bfloat16]
                                 [--repeat 2] [--rounds 5] [--parts tower,prefill] [--keep-full DIR]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import ENV, MANIFEST, ROOT, full_checkpoint  # noqa: E402

SIZE = 448                                                   # 28 x 28 patches, 196 tokens


# --------------------------------------------------------------------------------------------- the checkpoint

def write_tower_checkpoint(folder):
    """The real config.json and the 153 vision tensors in their real shapes and dtypes, seeded random
    values (LayerNorm weights around 1), in the real shard name, with its index."""
    import torch
    sys.path.insert(0, str(ROOT))
    from engine.shapes import vision_shapes
    from qwen.config import VisionConfig
    from engine.tiny import write_checkpoint

    config = json.loads(MANIFEST.read_text(encoding="utf-8"))["config"]
    g = torch.Generator().manual_seed(0)
    tensors = {}
    for name, (shape, dtype) in vision_shapes(VisionConfig.from_config(config)).items():
        values = torch.randn(shape, generator=g)
        norm = ".norm" in name and name.endswith(".weight")
        tensors[name] = (1 + 0.1 * values if norm else 0.02 * values).to(getattr(torch, {"BF16": "bfloat16"}[dtype]))
    return write_checkpoint(folder, tensors, config)


# --------------------------------------------------------------------------------------------- the two sides

def image():
    """A 448 x 448 RGB picture with detail everywhere (seeded noise over colour gradients)."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:SIZE, 0:SIZE]
    base = np.stack([x, y, (x + y) // 2], -1) * 255 // (SIZE - 1)
    return Image.fromarray(np.clip(base + rng.integers(-40, 40, base.shape), 0, 255).astype("uint8"), "RGB")


class Ours:
    name = "ours"

    def __init__(self, path, dtype):
        import torch
        from qwen.model import VISUAL, _Converted
        from qwen.vision import VisionConfig, VisionModel
        from qwen.config import Config
        from qwen.weights import load, load_weights
        self.path = path
        with torch.device("meta"):
            self.tower = VisionModel(VisionConfig.from_config(Config.load(path)))
        load(self.tower, _Converted(load_weights(path), dtype), VISUAL)   # what load_model does for model.visual

    def __call__(self, img):
        from qwen.vision import preprocess
        pixels, grid = preprocess(img, self.path)
        return self.tower(pixels, grid)


class Transformers:
    name = "transformers"

    def __init__(self, path, dtype):
        import torch
        import transformers
        from safetensors.torch import load_file
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
        from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5VisionModel
        from qwen.image import REAL_SETTINGS as s

        transformers.logging.set_verbosity_error()
        config = transformers.Qwen3_5Config.from_pretrained(path).vision_config
        self.tower = Qwen3_5VisionModel(config).eval()
        inv_freq = self.tower.rotary_pos_emb.inv_freq                  # fp32, as from_pretrained(dtype=...) keeps it:
        self.tower.to(dtype).rotary_pos_emb.inv_freq = inv_freq        # .to(bfloat16) alone would round the frequencies
        stored = load_file(next(Path(path).glob("*.safetensors")))
        self.tower.load_state_dict({k[len("model.visual."):]: v for k, v in stored.items()}, strict=True)
        del stored
        self.processor = Qwen2VLImageProcessorPil(
            size={"shortest_edge": s.min_pixels, "longest_edge": s.max_pixels}, patch_size=s.patch_size,
            temporal_patch_size=s.temporal_patch_size, merge_size=s.merge_size, image_mean=list(s.image_mean),
            image_std=list(s.image_std))

    def __call__(self, img):
        inputs = self.processor(images=[img], return_tensors="pt")
        pixels = inputs["pixel_values"].to(self.tower.dtype)              # as get_image_features does
        return self.tower(pixels, grid_thw=inputs["image_grid_thw"]).pooler_output


SIDES = {"ours": Ours, "transformers": Transformers}


# --------------------------------------------------------------------------------------------- children

def _kb(field):
    return int(re.search(field + r":\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1))


def child_memory(side, path, dtype, out):
    """Fresh process: load the tower, open the image, then what one call adds to the peak RSS."""
    import torch
    model, img = SIDES[side](path, dtype), image()
    img.load()
    for p in model.tower.parameters():                               # resident, both sides: ours maps bf16 weights
        p.sum()                                                      # from the file, paged in on first use
    Path("/proc/self/clear_refs").write_text("5")                     # peak RSS := current RSS
    before = _kb("VmRSS")
    start = time.perf_counter()
    with torch.inference_mode():
        tokens = model(img)
    seconds = time.perf_counter() - start
    out.write_text(json.dumps(dict(extra_mb=(_kb("VmHWM") - before) / 1024, first_s=seconds,
                                   tokens=list(tokens.shape))))


def child_speed(path, dtype, out, rounds):
    """Both sides in one process, alternately, after a warm-up each: the best time of each."""
    import torch
    sides = [cls(path, dtype) for cls in SIDES.values()]
    for side in sides:
        for p in side.tower.parameters():
            p.sum()
    img = image()
    best, results = {}, {}
    with torch.inference_mode():
        for side in sides:
            results[side.name] = side(img)                           # warm-up (oneDNN picks its kernels)
        for _ in range(rounds):
            for side in sides:
                start = time.perf_counter()
                results[side.name] = side(img)
                best[side.name] = min(best.get(side.name, float("inf")), time.perf_counter() - start)
    ours, ref = results["ours"].float(), results["transformers"].float()
    out.write_text(json.dumps(dict(best=best, shape=list(ours.shape), ref_shape=list(ref.shape),
                                   relative=((ours - ref).abs().max() / ref.abs().max()).item(),
                                   attention=sides[1].tower.config._attn_implementation)))


# --------------------------------------------------------------------------------------------- prefill

QUESTION = "Describe this picture in one sentence."


def prompt_ids(path):
    """The chat prompt's ids with the image's pad tokens expanded (ours; transformers gets the same ids)."""
    from qwen.config import Config
    from engine.conversation import chat_ids
    from engine.tokens import load_tokenizer
    from qwen.generate import ChatTemplate, image_prompt_ids, with_images
    from qwen.vision import preprocess
    grid = preprocess(image(), path)[1]
    ids = chat_ids(load_tokenizer(path), ChatTemplate.load(path), with_images(QUESTION, 1), enable_thinking=False)
    return image_prompt_ids(ids, Config.load(path), grid)


class OursPrefill:
    def __init__(self, path, dtype):
        from qwen.model import load_model
        self.path, self.model = path, load_model(path, dtype=dtype)

    def __call__(self, img, ids):
        import torch
        from qwen.vision import preprocess
        pixels, grid = preprocess(img, self.path)
        return self.model(torch.tensor([ids]), cache=self.model.new_cache(), last=True,
                          pixel_values=pixels, grid_thw=grid)[0, -1]


class TransformersPrefill:
    def __init__(self, path, dtype):
        import transformers
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
        from qwen.image import REAL_SETTINGS as s
        transformers.logging.set_verbosity_error()
        self.model = transformers.Qwen3_5ForConditionalGeneration.from_pretrained(path, dtype=dtype).eval()
        self.processor = Qwen2VLImageProcessorPil(
            size={"shortest_edge": s.min_pixels, "longest_edge": s.max_pixels}, patch_size=s.patch_size,
            temporal_patch_size=s.temporal_patch_size, merge_size=s.merge_size, image_mean=list(s.image_mean),
            image_std=list(s.image_std))

    def __call__(self, img, ids):
        import torch
        inputs = self.processor(images=[img], return_tensors="pt")
        ids = torch.tensor([ids])
        out = self.model(input_ids=ids, pixel_values=inputs["pixel_values"], image_grid_thw=inputs["image_grid_thw"],
                         mm_token_type_ids=(ids == self.model.config.image_token_id).int(), use_cache=True,
                         logits_to_keep=1)
        return out.logits[0, -1]


PREFILL = {"ours": OursPrefill, "transformers": TransformersPrefill}


def child_prefill(side, path, dtype, out, rounds):
    """Fresh process, one side: load the whole model, then warm-up + `rounds` timed prefills; the best."""
    import torch
    ids, img = prompt_ids(path), image()
    model = PREFILL[side](path, dtype)
    with torch.inference_mode():
        logits = model(img, ids)                                     # warm-up
        best = float("inf")
        for _ in range(rounds):
            start = time.perf_counter()
            logits = model(img, ids)
            best = min(best, time.perf_counter() - start)
    torch.save(logits.float(), out.with_suffix(".pt"))
    from qwen.config import Config
    image_id = Config.load(path).image_tokens()[0]
    out.write_text(json.dumps(dict(best=best, tokens=len(ids), image_tokens=ids.count(image_id))))


def compare_prefill(path, dtype, threads, repeat, rounds):
    import torch
    best, logits = {side: [] for side in PREFILL}, {}
    for _ in range(repeat):                                          # alternated fresh processes
        for side in PREFILL:
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "result.json"
                argv = [sys.executable, __file__, "--child", "prefill", "--side", side, "--path", str(path),
                        "--dtype", dtype, "--out", str(out), "--threads", str(threads), "--rounds", str(rounds)]
                r = subprocess.run(argv, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                if r.returncode != 0:
                    raise SystemExit(f"prefill {side} {dtype} failed:\n{r.stderr.decode()[-3000:]}")
                result = json.loads(out.read_text())
                best[side].append(result["best"])
                print(f"  prefill {side}: {result['best']:.3f} s", flush=True)      # kept if a later child is cut short
                logits[side] = torch.load(out.with_suffix(".pt"))
    o, h = min(best["ours"]), min(best["transformers"])
    ours, ref = logits["ours"], logits["transformers"]
    print(f"\n== prefill, {dtype}, {threads} threads: a chat prompt of {result['tokens']} tokens with one "
          f"{SIZE} x {SIZE} image ({result['image_tokens']} of them), full-size model ==")
    print(f"{'':44}{'ours':>10}{'transformers':>14}{'ours / theirs':>15}")
    print(f"{f'preprocess + prefill, best of {repeat} x {rounds} (s)':44}{o:>10.3f}{h:>14.3f}{o / h:>14.2f}x")
    print(f"last logits: max |ours - transformers| / max |transformers| = "
          f"{((ours - ref).abs().max() / ref.abs().max()).item():.2e}; same top token: "
          f"{int(ours.argmax()) == int(ref.argmax())}")
    return [(f"{dtype}: one-image prefill, ours / transformers", o / h, 1.0)]


# --------------------------------------------------------------------------------------------- parent

def run_child(kind, path, dtype, threads, side="", rounds=1):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        argv = [sys.executable, __file__, "--child", kind, "--side", side, "--path", str(path), "--dtype", dtype,
                "--out", str(out), "--threads", str(threads), "--rounds", str(rounds)]
        r = subprocess.run(argv, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if r.returncode != 0:
            raise SystemExit(f"{kind} {side} {dtype} failed:\n{r.stderr.decode()[-3000:]}")
        return json.loads(out.read_text())


def compare(path, dtype, threads, repeat, rounds):
    memory = {side: [] for side in SIDES}
    for _ in range(repeat):                                          # alternated fresh processes
        for side in SIDES:
            memory[side].append(run_child("memory", path, dtype, threads, side))
    speed = run_child("speed", path, dtype, threads, rounds=rounds)
    (o, h) = (speed["best"][s] for s in SIDES)
    om, hm = (max(r["extra_mb"] for r in memory[s]) for s in SIDES)
    of, hf = (min(r["first_s"] for r in memory[s]) for s in SIDES)
    print(f"\n== {dtype}, {threads} threads, one {SIZE} x {SIZE} image -> {speed['shape'][0]} tokens of "
          f"{speed['shape'][1]} (transformers' attention: {speed['attention']}) ==")
    print(f"{'':44}{'ours':>10}{'transformers':>14}{'ours / theirs':>15}")
    rows = [(f"preprocess + tower, best of {rounds} (s)", o, h), ("first call in a fresh process (s)", of, hf),
            (f"peak extra memory, max of {repeat} (MB)", om, hm)]
    for name, a, b in rows:
        print(f"{name:44}{a:>10.3f}{b:>14.3f}{a / b:>14.2f}x")
    print(f"image tokens: max |ours - transformers| / max |transformers| = {speed['relative']:.2e}; "
          f"shapes {speed['shape']} and {speed['ref_shape']}")
    return [(f"{dtype}: time, ours / transformers", o / h, 1.0),
            (f"{dtype}: peak extra memory, ours / transformers", om / hm, 1.0)]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keep", help="write (or reuse) the full-size tower checkpoint here")
    p.add_argument("--threads", type=int, default=0, help="torch threads for both sides (default: torch's)")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--repeat", type=int, default=2, help="fresh processes per side for the memory, alternated")
    p.add_argument("--rounds", type=int, default=5, help="alternated timed runs per side, in one process")
    p.add_argument("--parts", default="tower,prefill", help="tower (preprocessing + tower), prefill (a one-image prompt)")
    p.add_argument("--prefill-dtypes", default="float32",
                   help="dtypes of the prefill (default: fp32, the course's; one 3.5 GB process at a time)")
    p.add_argument("--keep-full", help="write (or reuse) the full-size checkpoint of the prefill here")
    p.add_argument("--child"), p.add_argument("--side"), p.add_argument("--path"), p.add_argument("--dtype")
    p.add_argument("--out")
    args = p.parse_args()
    if args.child:
        import torch
        sys.path.insert(0, str(ROOT))
        if args.threads:
            torch.set_num_threads(args.threads)
        dtype, out = getattr(torch, args.dtype), Path(args.out)
        if args.child == "memory":
            child_memory(args.side, args.path, dtype, out)
        elif args.child == "prefill":
            child_prefill(args.side, args.path, dtype, out, args.rounds)
        else:
            child_speed(args.path, dtype, out, args.rounds)
        return

    threads = args.threads or int(subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                                                 capture_output=True, text=True, env=ENV).stdout)
    parts = args.parts.split(",")
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="qwen-tower-"))
    if "tower" in parts and not (folder / "config.json").is_file():
        print(f"writing the full-size tower to {folder}" + ("" if args.keep else " (deleted at the end)"), flush=True)
        code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); " \
               f"from bench_vision import write_tower_checkpoint; write_tower_checkpoint({str(folder)!r})"
        subprocess.run([sys.executable, "-c", code], check=True, env=ENV)
    print(f"machine load (uptime): {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    targets = []
    for dtype in args.dtypes.split(",") if "tower" in parts else ():
        targets += compare(folder, dtype, threads, args.repeat, args.rounds)
    if "prefill" in parts:
        full = full_checkpoint(args.keep_full)
        for dtype in args.prefill_dtypes.split(","):
            targets += compare_prefill(full, dtype, threads, args.repeat, args.rounds)
        if not args.keep_full:
            import shutil
            shutil.rmtree(full, ignore_errors=True)
    print()
    ok = True
    for text, value, limit in targets:
        ok &= value <= limit
        print(f"{'PASS' if value <= limit else 'FAIL'}  {text:<52} {value:>8.2f}  (target <= {limit})")
    if not args.keep:
        import shutil
        shutil.rmtree(folder, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
