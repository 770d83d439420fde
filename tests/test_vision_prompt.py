"""Images in the prompt, against transformers' Qwen3.5, on a checkpoint transformers wrote with a
vision_config: the 3D positions (get_rope_index), the logits with one and with two images, greedy
generation after an image, cached decoding, and the bad inputs (pad counts, typed <|image_pad|>)."""
import functools
import os
import tempfile

import pytest
import torch

from qwen.lang import QwenError

transformers = pytest.importorskip("transformers")

TEXT = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            layer_types=["linear_attention", "full_attention"], num_attention_heads=4, num_key_value_heads=2,
            head_dim=32, linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=16,
            linear_value_head_dim=16, linear_conv_kernel_dim=4, rms_norm_eps=1e-6, max_position_embeddings=4096,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.5,
                             "mrope_section": [3, 3, 2], "mrope_interleaved": True})
VISION = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=64,
              patch_size=4, num_position_embeddings=16, temporal_patch_size=2, spatial_merge_size=2)
IDS = dict(image_token_id=120, video_token_id=121, vision_start_token_id=118, vision_end_token_id=119)
IMAGE, START, END = IDS["image_token_id"], IDS["vision_start_token_id"], IDS["vision_end_token_id"]
GRIDS = {"wide": (1, 4, 6), "tall": (1, 6, 4), "square": (1, 4, 4)}   # patches; / 2 x 2 merge: 6, 6, 4 tokens


@functools.lru_cache(maxsize=None)
def _checkpoint():
    """(folder, transformers' Qwen3_5ForConditionalGeneration), written once per session, seeded."""
    config = transformers.Qwen3_5Config(text_config=TEXT, vision_config=VISION, tie_word_embeddings=True, **IDS)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.Qwen3_5ForConditionalGeneration(config).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 0.3 if name.endswith("norm.weight") else 1 / p.shape[-1] ** 0.5
            p.copy_(torch.randn(p.shape, generator=g) * scale)
    folder = tempfile.mkdtemp(prefix="hf-vision-", dir=os.environ.get("TBH_TEST_TMP"))
    model.save_pretrained(folder)
    return folder, model


@pytest.fixture(scope="module")
def checkpoint():
    return _checkpoint()


@pytest.fixture(scope="module")
def ours(checkpoint):
    from qwen.model import load_model
    from qwen.vision import VisionModel
    model = load_model(checkpoint[0])
    assert isinstance(model.visual, VisionModel)          # the whole model is ours, the tower included
    return model


def _text(n, seed):
    return torch.randint(0, START, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _image(kind):
    t, h, w = GRIDS[kind]
    return [START] + [IMAGE] * (t * h * w // 4) + [END]


def _prompt(*parts):
    """ids (1, seq) and grid_thw (images, 3) from parts: an int n is n text tokens, a str an image."""
    ids, grids = [], []
    for i, part in enumerate(parts):
        if isinstance(part, str):
            ids += _image(part)
            grids.append(GRIDS[part])
        else:
            ids += _text(part, seed=i)
    return torch.tensor([ids]), torch.tensor(grids, dtype=torch.long).reshape(-1, 3)


def _pixels(grid_thw, seed=0):
    patches = int(grid_thw.prod(-1).sum())
    return torch.randn(patches, 3 * 2 * 4 * 4, generator=torch.Generator().manual_seed(seed))


def _hf_positions(model, ids, grid_thw):
    return model.model.get_rope_index(ids, mm_token_type_ids=(ids == IMAGE).int(),
                                      image_grid_thw=grid_thw if len(grid_thw) else None)


CASES = {"text-image-text": (5, "wide", 7), "two images": (3, "wide", 2, "tall", 4), "image first": ("square", 6),
         "image last": (4, "tall"), "text only": (9,)}


@pytest.mark.parametrize("case", list(CASES))
def test_rope_index_equals_get_rope_index(case, checkpoint):
    from qwen.config import Config
    from qwen.vision import rope_index
    ids, grids = _prompt(*CASES[case])
    ref, delta = _hf_positions(checkpoint[1], ids, grids)
    got = rope_index(ids, grids, Config.load(checkpoint[0]))
    assert got.dtype == torch.int64 and got.shape == (3, 1, ids.shape[1])
    assert torch.equal(got, ref)
    assert got.max() + 1 - ids.shape[1] == delta.item()         # the rope delta decoding goes on with
    if len(grids):
        assert delta.item() < 0                                   # position != token index after an image


def test_text_after_a_448_image_continues_at_14_not_196():
    """The 448 x 448 example: a 28 x 28 patch grid -> 14 x 14 = 196 tokens spanning 14 positions."""
    from engine.tiny import tiny_config
    from qwen.config import Config
    from qwen.vision import rope_index
    cfg = Config.from_dict(tiny_config())
    image = cfg.raw["image_token_id"]
    ids = torch.tensor([[1, 2] + [image] * 196 + [3, 4]])
    pos = rope_index(ids, torch.tensor([[1, 28, 28]]), cfg)
    assert pos[:, 0, 2].tolist() == [2, 2, 2] and pos[:, 0, 197].tolist() == [2, 15, 15]
    assert pos[:, 0, 198].tolist() == [16, 16, 16]               # 2 + 14, not 2 + 196
    assert pos[:, 0, 199].tolist() == [17, 17, 17]


def test_rope_index_starts_after_a_cache(checkpoint):
    from qwen.config import Config
    from qwen.vision import rope_index
    cfg = Config.load(checkpoint[0])
    ids, grids = _prompt(5, "wide", 3)
    whole = rope_index(ids, grids, cfg)
    assert torch.equal(rope_index(ids, grids, cfg, start=10), whole + 10)


@torch.inference_mode()
@pytest.mark.parametrize("case", ["text-image-text", "two images", "image first", "image last"])
def test_logits_with_images_equal_transformers(case, checkpoint, ours):
    ids, grids = _prompt(*CASES[case])
    pixels = _pixels(grids)
    ref = checkpoint[1](input_ids=ids, pixel_values=pixels, image_grid_thw=grids,
                        mm_token_type_ids=(ids == IMAGE).int()).logits
    got = ours(ids, pixel_values=pixels, grid_thw=grids)
    assert got.shape == ref.shape == (1, ids.shape[1], 128)
    assert (got - ref).abs().max().item() < 1e-4, (got - ref).abs().max().item()
    assert (ours(ids) - ref).abs().max() > 1e-2                 # the same ids read as text: not the same


@torch.inference_mode()
def test_cached_decoding_after_an_image_equals_recomputing(ours):
    ids, grids = _prompt(4, "wide", 9)
    pixels = _pixels(grids, seed=1)
    full = ours(ids, pixel_values=pixels, grid_thw=grids)        # (1, seq, vocab), no cache
    cache = ours.new_cache()
    split = 4 + 8 + 3                                           # the image (6 tokens + start, end) in the first part
    pieces = [ours(ids[:, :split], cache=cache, pixel_values=pixels, grid_thw=grids)]
    assert cache.delta == 3 - 6                                 # 6 tokens span 3 positions
    pieces += [ours(ids[:, t:t + 1], cache=cache) for t in range(split, ids.shape[1])]
    assert (torch.cat(pieces, dim=1) - full).abs().max().item() < 1e-5
    twin = cache.copy()
    assert twin.delta == cache.delta and twin.length == cache.length


@torch.inference_mode()
def test_an_image_read_after_a_cache_equals_reading_it_at_once(ours):
    ids, grids = _prompt(6, "tall", 5, "square", 3)
    pixels = _pixels(grids, seed=2)
    full = ours(ids, pixel_values=pixels, grid_thw=grids)
    cache, first = ours.new_cache(), 6 + 8 + 5                  # text, the first image, text | the second image
    per = int(grids[0].prod())
    a = ours(ids[:, :first], cache=cache, pixel_values=pixels[:per], grid_thw=grids[:1])
    b = ours(ids[:, first:], cache=cache, pixel_values=pixels[per:], grid_thw=grids[1:])
    assert (torch.cat([a, b], dim=1) - full).abs().max().item() < 1e-5


@torch.inference_mode()
def test_greedy_generation_after_an_image_equals_transformers(checkpoint, ours):
    from qwen.generate import generate_ids
    ids, grids = _prompt(3, "wide", 5)
    pixels = _pixels(grids, seed=3)
    got = list(generate_ids(ours, ids[0].tolist(), max_new_tokens=20, pixel_values=pixels, grid_thw=grids))
    ref = checkpoint[1].generate(ids, pixel_values=pixels, image_grid_thw=grids, mm_token_type_ids=(ids == IMAGE).int(),
                                 max_new_tokens=20, min_new_tokens=20, do_sample=False)
    assert got == ref[0, ids.shape[1]:].tolist()


@torch.inference_mode()
def test_text_only_forward_is_unchanged(ours):
    ids = torch.tensor([_text(12, seed=5)])
    cache = ours.new_cache()
    a = ours(ids, cache=cache)
    assert cache.delta == 0
    b = ours(ids, pixel_values=None, grid_thw=None)
    assert torch.equal(a, b)


@torch.inference_mode()
@pytest.mark.parametrize("change", ["one pad more", "one pad less", "no image given", "two grids, one image"])
def test_pad_count_mismatch_is_one_line(change, ours):
    ids, grids = _prompt(3, "wide", 3)
    pixels = _pixels(grids)
    if change == "one pad more":
        ids = torch.cat([ids[:, :5], torch.tensor([[IMAGE]]), ids[:, 5:]], dim=1)
    elif change == "one pad less":
        ids = torch.cat([ids[:, :5], ids[:, 6:]], dim=1)
    elif change == "two grids, one image":
        grids = torch.cat([grids, grids])
        pixels = _pixels(grids)
    if change == "no image given":
        from qwen.vision import rope_index
        with pytest.raises(QwenError, match="image pad tokens"):
            rope_index(ids, None, ours.cfg)
        return
    with pytest.raises(QwenError, match="image pad tokens") as e:
        ours(ids, pixel_values=pixels, grid_thw=grids)
    assert "\n" not in str(e.value)


@torch.inference_mode()
@pytest.mark.parametrize("grid, says", [
    (lambda g: g.float(), "grid_thw has shape (1, 3) and dtype float32; it should be (images, 3) whole numbers"),
    (lambda g: -g, "grid_thw (-1, -"),
    (lambda g: torch.cat([g[0], torch.tensor([4])]), "grid_thw has shape (4,) and dtype int64"),
    (lambda g: g[0].tolist() + [4], "grid_thw has shape (4,) and dtype int64"),
], ids=["float", "negative", "four numbers", "a list of four"])
def test_a_malformed_grid_is_one_line_not_a_torch_error(grid, says, ours):
    """A malformed grid_thw is one QwenError line saying what it should be, not a TypeError (slice
    indices), a RuntimeError (arange's bound and step) or a reshape error from inside the prompt code."""
    ids, grids = _prompt(3, "wide", 3)
    pixels = _pixels(grids)
    with pytest.raises(QwenError) as e:
        ours(ids, pixel_values=pixels, grid_thw=grid(grids))
    assert str(e.value).startswith(says) and "\n" not in str(e.value), str(e.value)


@torch.inference_mode()
def test_pixel_values_as_a_numpy_array_give_the_same_logits(ours):
    """pixel_values given as a numpy array (as an image library returns) work like a tensor, with no
    AttributeError ('numpy.ndarray' object has no attribute 'to') inside the patch embedding."""
    ids, grids = _prompt(3, "wide", 3)
    pixels = _pixels(grids)
    assert torch.equal(ours(ids, pixel_values=pixels.numpy(), grid_thw=grids), ours(ids, pixel_values=pixels, grid_thw=grids))


# --------------------------------------------------------------------------------------------
# The chat template, the pad tokens, a chat with an image (the built-in tiny checkpoint)
# --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny(tiny_path):
    from qwen.generate import ChatTemplate
    from qwen.tokenizer import Tokenizer
    return Tokenizer.load(tiny_path), ChatTemplate.load(tiny_path)


def test_the_tiny_template_renders_image_items_as_the_real_one(tiny):
    _, template = tiny
    text = template.render([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]}],
                           enable_thinking=False)
    assert text == ("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>What is it?<|im_end|>\n"
                    "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    with pytest.raises(QwenError, match="System message cannot contain images"):
        template.render([{"role": "system", "content": [{"type": "image"}]}, {"role": "user", "content": "hi"}])


def test_typed_image_pad_opens_no_image_slot(tiny, tiny_path):
    """<|image_pad|> typed in a user's text, a string or a text item, is encoded as text: only the
    template's pad (one per image item) is the image token, and only it is expanded."""
    from qwen.config import Config
    from engine.conversation import chat_ids
    from qwen.generate import image_prompt_ids
    tok, template = tiny
    cfg = Config.load(tiny_path)
    image = cfg.raw["image_token_id"]
    typed = "look <|image_pad|><|vision_start|><|image_pad|><|vision_end|> here"
    messages = [{"role": "system", "content": typed},
                {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": typed}]}]
    ids = chat_ids(tok, template, messages)
    assert ids.count(image) == 1 and ids.count(cfg.raw["vision_start_token_id"]) == 1
    expanded = image_prompt_ids(ids, cfg, torch.tensor([[1, 28, 28]]))      # 448 x 448: 14 x 14 tokens
    assert expanded.count(image) == 196 and len(expanded) == len(ids) + 195
    with pytest.raises(QwenError, match=r"1 image slots .* for 2 image\(s\)"):
        image_prompt_ids(ids, cfg, torch.tensor([[1, 28, 28], [1, 4, 4]]))
    text_only = chat_ids(tok, template, [{"role": "user", "content": typed}])
    with pytest.raises(QwenError, match=r"0 image slots"):
        image_prompt_ids(text_only, cfg, torch.tensor([[1, 4, 4]]))


@pytest.fixture(scope="module")
def tiny_model(tiny_path):
    from qwen.model import load_model
    return load_model(tiny_path)


def _tiny_image(model, t=1, h=8, w=12, seed=0):
    v = model.cfg.raw["vision_config"]
    pixels = torch.randn(t * h * w, 3 * v["temporal_patch_size"] * v["patch_size"] ** 2,
                         generator=torch.Generator().manual_seed(seed))
    return pixels, torch.tensor([[t, h, w]])


def _turns(model, tok, reuse):
    from engine.conversation import Chat
    chat, out = Chat(model, tok, reuse=reuse), []
    pixels, grid = _tiny_image(model)
    for n, text in enumerate(("What is in the picture?", "And its colour?", "Thanks.")):
        image = dict(pixel_values=pixels, grid_thw=grid) if n == 0 else {}
        out.append(("".join(chat.say(text, max_new_tokens=8, **image)), chat.reused))
    return out, chat


@torch.inference_mode()
def test_a_chat_with_an_image_reuses_its_caches_and_replies_as_reading_it_all(tiny_model, tiny):
    """Turn 1 holds the image (24 tokens spanning 6 positions); later turns continue a kept cache,
    whose rope delta places them after the image, and reply token for token as reading it all."""
    tok, _ = tiny
    again, _ = _turns(tiny_model, tok, reuse=False)
    reused, chat = _turns(tiny_model, tok, reuse=True)
    assert [r for r, _ in reused] == [r for r, _ in again]
    assert all(n == 0 for _, n in again) and all(n > 0 for _, n in reused[1:])
    assert chat.cache.delta == 6 - 24 and chat.saved.delta == 6 - 24
    assert chat.ids(chat.messages).count(tiny_model.cfg.raw["image_token_id"]) == 24


@torch.inference_mode()
def test_generate_with_an_image_uses_the_cache_like_text(tiny_model, tiny):
    """generate() with an image: the prompt read once, then one token per step, equal to recomputing
    the whole sequence (image included) for every token."""
    from qwen.generate import generate, image_prompt_ids, prompt_ids, with_images
    tok, template = tiny
    pixels, grid = _tiny_image(tiny_model, seed=1)
    ids_out, stats = [], {}
    "".join(generate(tiny_model, tok, "Describe it.", max_new_tokens=6, template=template, pixel_values=pixels,
                     grid_thw=grid, ids_out=ids_out, stats=stats))
    prompt = image_prompt_ids(prompt_ids(tok, with_images("Describe it.", 1), template=template), tiny_model.cfg, grid)
    assert stats["prompt_tokens"] == len(prompt)
    seq = list(prompt)
    for token in ids_out:                                                   # greedy, recomputed each step
        logits = tiny_model(torch.tensor([seq]), pixel_values=pixels, grid_thw=grid)[0, -1, :tok.vocab_size]
        assert int(logits.argmax()) == token
        seq.append(token)


def _picture(folder):
    from PIL import Image, ImageDraw
    image = Image.new("RGB", (48, 40), "white")
    ImageDraw.Draw(image).ellipse((8, 6, 40, 34), fill="red")
    image.save(folder / "circle.png")
    return folder / "circle.png"


def test_chat_image_goes_with_the_first_message(tiny_path, tmp_path, capsys):
    """python main.py chat --image PATH: the picture's tokens are in the first prompt, not the second."""
    from engine.chat import chat_loop
    from qwen.vision import preprocess
    picture = _picture(tmp_path)
    grid = preprocess(picture, tiny_path)[1][0].tolist()
    n = grid[0] * grid[1] * grid[2] // 4
    prompts = {}
    for image in (None, picture):
        lines = iter(["hi", "and now?", "/quit"])
        chat_loop(tiny_path, max_new_tokens=2, image=image, read=lambda prompt: next(lines))
        out, err = capsys.readouterr()
        prompts[image] = [int(line.split(" of ")[1].split()[0]) for line in err.splitlines() if " of " in line]
    assert f"Image {picture}: {grid[1]} x {grid[2]} patches, {n} tokens; it goes with your first message." in out
    assert prompts[picture][0] == prompts[None][0] + n + 2                 # <|vision_start|>, n pads, <|vision_end|>
    assert len(prompts[picture]) == 2 and prompts[picture][1] > prompts[picture][0]


@pytest.mark.parametrize("args, says", [
    (["chat", "--tiny", "--image", "no/such/picture.png"], "picture.png"),
    (["3", "--tiny", "--image", "x.png"], "--image goes with chat"),
])
def test_chat_image_bad_input_is_one_line(args, says, run_script, tmp_path):
    r = run_script("main.py", *args)
    assert r.returncode != 0 and says in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) <= 2, r.stderr


def test_chat_image_with_a_tower_less_checkpoint_stops_before_the_first_message(tiny_path, tmp_path, capsys):
    """A multimodal config.json whose model.visual.* tensors are stripped: the chat says the checkpoint
    has no vision tower before it announces the image or waits for a message."""
    import shutil
    from engine.chat import chat_loop
    from engine.tiny import tiny_config, tiny_tensors, write_checkpoint
    folder = shutil.copytree(tiny_path, tmp_path / "stripped")            # tokenizer, template, preprocessor
    write_checkpoint(folder, {k: v for k, v in tiny_tensors().items() if not k.startswith("model.visual.")},
                     tiny_config())
    asked = []
    with pytest.raises(QwenError, match=r"has no vision tower \(model\.visual\.\* tensors\), so --image cannot be read"):
        chat_loop(folder, max_new_tokens=2, image=_picture(tmp_path), read=lambda prompt: asked.append(prompt) or "/quit")
    assert asked == [] and "it goes with your first message" not in capsys.readouterr().out


# --------------------------------------------------------------------------------------------
# Exercise 242: the 3D position ids
# --------------------------------------------------------------------------------------------

def _grade_242(judge, file, explain_all=False):
    from practice._judge.grading import grade
    from engine.tiny import tiny_model_path
    return grade(judge.BY_ID["242"], tiny_model_path(), file=file, explain_all=explain_all)


def test_exercise_242_wrong_files_are_named_with_their_own_mistake(judge):
    from conftest import ROOT
    wrong = judge.BY_ID["242"].wrong
    assert "242_plus_n_tokens.py" in wrong and len(wrong) >= 4
    for name, want in wrong.items():
        result = _grade_242(judge, ROOT / "practice" / "_judge" / "wrong" / name)
        named = {c["diagnosis"]["name"] for c in result["cases"] if c.get("diagnosis")}
        failed = [c for c in result["cases"] if not c["ok"]]
        assert result["status"] == "fail" and named == {want}, (name, named)
        assert all(c["diagnosis"] for c in failed), name
    ex = judge.BY_ID["242"]
    for file in [ex.solution, *ex.equivalents()]:
        result = _grade_242(judge, file, explain_all=True)
        assert result["status"] == "pass" and not any(c.get("diagnosis") for c in result["cases"]), file.name


def test_exercise_242_cases_are_the_448_example_and_the_edges(judge, tmp_path):
    """The first case is the 448 x 448 example: text after the image continues 14 positions on, not 196."""
    from practice._judge.exercises import Context
    from engine.tiny import tiny_model_path
    cases = judge.BY_ID["242"].cases(Context(tiny_model_path(), tmp_path))
    ids, grid, image, merge = cases[0].args
    assert grid.tolist() == [[1, 28, 28]] and int((ids == image).sum()) == 196
    first = int((ids == image).nonzero()[0])
    expected = cases[0].expected
    assert expected[:, first + 196].tolist() == [first + 14] * 3
    kinds = {(bool((c.args[0] == image).any()), c.args[0][0].item() == image, c.args[0][-1].item() == image)
             for c in cases}
    assert {(True, True, False), (True, False, True), (False, False, False)} <= kinds   # first, last, text only
