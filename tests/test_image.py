"""Image preprocessing (qwen/image.py) equals transformers' Qwen2VLImageProcessorPil, and every bad
image file gives one line naming it, in both languages."""
import functools
import io
import json
import math
import random
import struct
import zlib

import numpy as np
import pytest
import torch
from PIL import Image

from qwen.image import (REAL_SETTINGS, ImageSettings, image_settings, load_image, patchify, preprocess,
                        repeat_frames, smart_resize)
from qwen.lang import QwenError, set_lang
from engine.tiny import TINY_PREPROCESSOR_CONFIG

hf_pil = pytest.importorskip("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl")


def hf_processor(settings):
    s = settings
    return hf_pil.Qwen2VLImageProcessorPil(
        size={"shortest_edge": s.min_pixels, "longest_edge": s.max_pixels}, patch_size=s.patch_size,
        temporal_patch_size=s.temporal_patch_size, merge_size=s.merge_size, image_mean=list(s.image_mean),
        image_std=list(s.image_std))


@pytest.fixture(scope="module")
def settings_by_name(tiny_path):
    return {"real": REAL_SETTINGS, "tiny": image_settings(tiny_path)}


def picture(width, height, mode="RGB", seed=0):
    """A gradient with noise (bicubic sees both edges and flat parts), in the given mode."""
    rng = np.random.default_rng(seed)
    x = np.linspace(0, 215, width).astype(np.uint16)[None, :]
    y = np.linspace(0, 215, height).astype(np.uint16)[:, None]
    base = np.stack(np.broadcast_arrays(x, y, (x + y) // 2, 215 - x), axis=-1)            # (H, W, 4)
    pixels = base + rng.integers(0, 40, (height, width, 4), dtype=np.uint8)               # at most 254
    rgba = Image.fromarray(pixels.astype(np.uint8), mode="RGBA")
    if mode == "RGBA":
        return rgba
    rgb = rgba.convert("RGB")
    if mode == "P":
        return rgb.quantize(colors=64)
    return rgb.convert(mode)


def assert_like_transformers(images, settings):
    pixel_values, grid = preprocess(images, settings)
    ref = hf_processor(settings)(images=images if isinstance(images, list) else [images], return_tensors="np")
    expected = torch.from_numpy(ref["pixel_values"])
    assert pixel_values.dtype == torch.float32 and grid.dtype == torch.int64
    assert grid.tolist() == ref["image_grid_thw"].tolist()
    assert pixel_values.shape == expected.shape == (int(grid.prod(-1).sum()), settings.patch_dim)
    assert close(pixel_values, expected)
    return pixel_values, grid


def close(got, expected):
    """Within 1e-6 everywhere (one pass: assert_close takes seconds on 70 M values)."""
    return bool((got - expected).abs_().max() <= 1e-6)


@functools.lru_cache(maxsize=1)
def sized_picture(width, height):
    """One picture per size for both settings (3000 x 4000 takes a second to draw)."""
    return picture(width, height)


SIZES = [(32, 32), (33, 47), (448, 448), (1000, 200), (3000, 4000), (40, 6000)]   # (width, height); 40 x 6000 is 1 : 150


@pytest.mark.parametrize("which", ["real", "tiny"])
@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_sizes_equal_transformers(size, which, settings_by_name):
    settings = settings_by_name[which]
    _, grid = assert_like_transformers(sized_picture(*size), settings)
    (t, h, w), = grid.tolist()
    m = settings.merge_size
    assert t == 1 and h % m == 0 and w % m == 0 and h * w * settings.patch_size ** 2 >= settings.min_pixels


MODES = ["RGBA", "P", "CMYK", "L", "LA", "I;16", "1"]


@pytest.mark.parametrize("mode", MODES)
def test_modes_equal_transformers(mode, settings_by_name):
    """The conversions to RGB, transparency over white included, as transformers makes them."""
    if mode == "I;16":
        image = Image.fromarray((np.arange(60 * 70, dtype=np.uint16).reshape(60, 70) * 15))
        assert image.mode == "I;16"
    else:
        image = picture(70, 60, mode)
    for settings in settings_by_name.values():
        assert_like_transformers(image, settings)


def test_palette_with_a_transparent_colour_is_painted_over_white():
    image = picture(64, 64, "P")
    image.info["transparency"] = image.getpixel((0, 0))
    assert_like_transformers(image, REAL_SETTINGS)
    pixel_values, _ = preprocess(image, REAL_SETTINGS)
    assert pixel_values[0, 0].item() == 1.0            # the transparent top-left corner: white, (1 - 0.5) / 0.5


def test_two_images_are_concatenated_in_order(settings_by_name):
    images = [picture(448, 448, seed=1), picture(100, 300, "RGBA", seed=2)]
    for settings in settings_by_name.values():
        pixel_values, grid = assert_like_transformers(images, settings)
        first = preprocess(images[0], settings)[0]
        assert grid.shape == (2, 3) and torch.equal(pixel_values[:len(first)], first)


@pytest.mark.parametrize("mode", ["RGBA", "P", "P transparent", "LA", "CMYK"])
def test_load_image_files_equal_transformers(tmp_path, mode):
    """A file through load_image then preprocess equals transformers on Image.open of the same file."""
    image = picture(90, 50, mode.split()[0], seed=3)
    if mode == "P transparent":
        image.info["transparency"] = image.getpixel((5, 5))
    file = tmp_path / ("picture.jpg" if mode == "CMYK" else "picture.png")
    image.save(file)
    with Image.open(file) as opened:
        assert opened.mode == mode.split()[0] and (mode != "P transparent" or "transparency" in opened.info)
    ours = preprocess(load_image(file), REAL_SETTINGS)
    with Image.open(file) as opened:
        ref = hf_processor(REAL_SETTINGS)(images=[opened], return_tensors="np")
    assert close(ours[0], torch.from_numpy(ref["pixel_values"]))
    assert ours[1].tolist() == ref["image_grid_thw"].tolist()
    assert load_image(file).mode == "RGB"


def test_load_image_brings_16_bit_greyscale_to_8_bits(tmp_path):
    """A 16-bit PNG is shown by its top byte: Pillow's convert('RGB') alone would clip it to white."""
    values = (np.arange(40 * 50, dtype=np.uint16).reshape(40, 50) * 32)
    file = tmp_path / "sixteen.png"
    Image.fromarray(values).save(file)
    loaded = np.asarray(load_image(file))
    assert loaded.shape == (40, 50, 3) and np.array_equal(loaded[..., 1], (values >> 8).astype(np.uint8))
    assert (np.asarray(Image.open(file).convert("RGB"))[..., 0] == 255).mean() > 0.9     # what clipping gives


def test_rescale_in_fp32_equals_the_reference_fp64_one():
    levels = torch.arange(256)
    assert torch.equal(levels.float() / 255, (levels.double() * (1 / 255)).float())


def test_smart_resize_equals_transformers():
    rng = random.Random(0)
    cases = [(rng.randint(1, 5000), rng.randint(1, 5000)) for _ in range(3000)]
    cases += [(32, 32), (31, 33), (4096, 4096), (4097, 4096), (256, 256), (255, 257), (33, 47), (40, 6000)]
    for factor, low, high in [(32, 65536, 16777216), (8, 1024, 9216), (28, 3136, 12845056)]:
        for h, w in cases:
            if max(h, w) > 200 * min(h, w):
                continue
            assert smart_resize(h, w, factor, low, high) == hf_pil.smart_resize(h, w, factor, low, high), (h, w, factor)


def test_smart_resize_floors_at_the_upper_bound_and_ceils_at_the_lower():
    h, w = smart_resize(4000, 3000, 32, 65536, 4000 * 3000 // 2)      # rounding to nearest would pass the bound
    assert h % 32 == w % 32 == 0 and h * w <= 6_000_000
    h, w = smart_resize(50, 70, 32, 65536, 16777216)
    assert h % 32 == w % 32 == 0 and h * w >= 65536


def test_patchify_is_in_merge_block_order():
    """Rows 0-3 are the 4 patches of the top-left 2 x 2 block; each row is channel, frame, pixels."""
    C, H, W, P = 3, 8, 12, 2
    image = torch.arange(C * H * W, dtype=torch.float32).reshape(C, H, W)
    rows = patchify(repeat_frames(image, 2), P, 2, 2)
    assert rows.shape == (H // P * W // P, C * 2 * P * P)
    def patch(r, c):
        one = image[:, r * P:(r + 1) * P, c * P:(c + 1) * P]          # (C, P, P)
        return torch.stack((one, one), 1).flatten()                   # (C, T, P, P) flattened
    order = [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (0, 3), (1, 2), (1, 3)]
    for i, (r, c) in enumerate(order):
        assert torch.equal(rows[i], patch(r, c)), i


# ---------------------------------------------------------------------------- settings

def test_image_settings_of_the_real_and_the_tiny_checkpoint(tmp_path, tiny_path):
    assert image_settings(tmp_path) == REAL_SETTINGS                 # no preprocessor_config.json
    hf_processor(REAL_SETTINGS).save_pretrained(str(tmp_path / "saved"))
    read = image_settings(tmp_path / "saved")                         # the file transformers writes
    assert read.source.endswith("preprocessor_config.json")
    assert dataclass_values(read) == dataclass_values(REAL_SETTINGS)
    tiny = image_settings(tiny_path)
    assert (tiny.patch_size, tiny.merge_size, tiny.factor, tiny.patch_dim) == (4, 2, 8, 96)
    ref = hf_pil.Qwen2VLImageProcessorPil.from_pretrained(str(tiny_path))   # transformers reads our file alike
    assert (ref.size.shortest_edge, ref.size.longest_edge) == (tiny.min_pixels, tiny.max_pixels)
    assert TINY_PREPROCESSOR_CONFIG["size"]["longest_edge"] == tiny.max_pixels


def dataclass_values(s):
    return (s.min_pixels, s.max_pixels, s.patch_size, s.temporal_patch_size, s.merge_size, s.image_mean, s.image_std)


def test_min_and_max_pixels_win_over_size(tmp_path):
    body = {**TINY_PREPROCESSOR_CONFIG, "min_pixels": 2048, "max_pixels": 4096}
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(body), encoding="utf-8")
    s = image_settings(tmp_path)
    ref = hf_pil.Qwen2VLImageProcessorPil(**{k: v for k, v in body.items() if "processor" not in k})
    assert (s.min_pixels, s.max_pixels) == (ref.size.shortest_edge, ref.size.longest_edge) == (2048, 4096)


BROKEN_SETTINGS = [
    ("{ not json", "is not valid JSON", "不是合法的 JSON"),
    ("[1, 2]", "should hold a JSON object", "应当是一个 JSON 对象"),
    (json.dumps({k: v for k, v in TINY_PREPROCESSOR_CONFIG.items() if k != "patch_size"}),
     "patch_size is missing", "缺少 patch_size"),
    (json.dumps({**TINY_PREPROCESSOR_CONFIG, "size": {}}), "size.shortest_edge (or min_pixels) is missing",
     "缺少 size.shortest_edge"),
    (json.dumps({**TINY_PREPROCESSOR_CONFIG, "merge_size": "2"}), "merge_size should be a positive whole number",
     "merge_size 应当是正整数"),
    (json.dumps({**TINY_PREPROCESSOR_CONFIG, "image_std": [0.5, 0, 0.5]}), "image_std should be a list of 3 positive numbers",
     "image_std 应当是由 3 个正数组成的列表"),
    (json.dumps({**TINY_PREPROCESSOR_CONFIG, "size": {"shortest_edge": 10 ** 6, "longest_edge": 10}}),
     "shortest_edge <= longest_edge", "shortest_edge <= longest_edge"),
    # A lower bound of 10^12 pixels resized a 64 x 64 picture to 10^6 x 10^6 (a MemoryError, or gigabytes).
    (json.dumps({**TINY_PREPROCESSOR_CONFIG, "size": {"shortest_edge": 10 ** 12, "longest_edge": 10 ** 13}}),
     "size.shortest_edge (min_pixels) should be at most 16,777,216", "size.shortest_edge (min_pixels) 应当是不超过 16,777,216"),
    # Valid JSON numbers that overflow fp32 would give inf / nan pixel values without a word.
    (json.dumps({**TINY_PREPROCESSOR_CONFIG, "image_mean": [1e300, 0.5, 0.5]}),
     "image_mean / image_std should be numbers for which (x - mean) / std stays finite in fp32", "保持有限的数"),
    (json.dumps({**TINY_PREPROCESSOR_CONFIG, "image_std": [1e-300, 0.5, 0.5]}),
     "image_mean / image_std should be numbers", "image_mean / image_std 应当是使"),
]


@pytest.mark.parametrize("body, en, zh", BROKEN_SETTINGS, ids=[c[1].split(" ")[0] for c in BROKEN_SETTINGS])
def test_broken_settings_file_is_one_line_naming_it(tmp_path, body, en, zh):
    (tmp_path / "preprocessor_config.json").write_text(body, encoding="utf-8")
    with pytest.raises(QwenError) as e:
        image_settings(tmp_path)
    one_line_naming(e.value, "preprocessor_config.json", en, zh)


@pytest.mark.parametrize("preprocessor, en, zh", [
    ({**TINY_PREPROCESSOR_CONFIG, "patch_size": 8}, "patch_size is 8, but config.json's vision_config.patch_size is 4",
     "patch_size 是 8，但 config.json 的 vision_config.patch_size 是 4"),
    ({**TINY_PREPROCESSOR_CONFIG, "temporal_patch_size": 10 ** 6}, "vision_config.temporal_patch_size is 2",
     "来自不同的检查点"),
    (None, "is missing, and Qwen3.5's patch_size 16 (used in its place) disagrees with config.json's "
     "vision_config.patch_size 4", "缺少"),
], ids=["patch", "temporal", "absent"])
def test_preprocessor_settings_that_disagree_with_the_tower_are_one_line(tmp_path, tiny_path, preprocessor, en, zh):
    """Preprocessor settings the tower disagrees with are one line naming both files, before the model is
    loaded: not the tower's "pass the pixel values and the grid that preprocess returned together" (naming
    neither file), nor an attempt to allocate 49 GB (a temporal_patch_size of 10^6 on a 64 x 64 picture)."""
    (tmp_path / "config.json").write_bytes((tiny_path / "config.json").read_bytes())
    if preprocessor is not None:
        (tmp_path / "preprocessor_config.json").write_text(json.dumps(preprocessor), encoding="utf-8")
    with pytest.raises(QwenError) as e:
        preprocess(picture(64, 64), tmp_path)
    one_line_naming(e.value, "preprocessor_config.json", en, zh)
    assert image_settings(tiny_path).patch_size == 4                       # the tiny checkpoint's own files agree


def one_line_naming(error, name, en, zh):
    set_lang("en")
    text = str(error)
    assert name in text and en in text and "\n" not in text, text
    set_lang("zh")
    text = str(error)
    assert name in text and zh in text and "\n" not in text and text != error.en, text
    set_lang("en")


# ---------------------------------------------------------------------------- bad image files

def png_header_only(width, height):
    """A PNG that claims width x height (8-bit RGB) and holds no pixel data: a few dozen bytes."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) + \
        chunk(b"IEND", b"")


def png_bytes(width, height):
    out = io.BytesIO()
    picture(width, height).save(out, format="PNG")
    return out.getvalue()


def bad_not_an_image(p):
    p.write_text("hello, I am text", encoding="utf-8")


def bad_truncated(p):
    p.write_bytes(png_bytes(300, 300)[:3000])


def bad_empty(p):
    p.write_bytes(b"")


def bad_folder(p):
    p.mkdir()


def bad_missing(p):
    pass


def bad_bomb(p):                              # over MAX_IMAGE_PIXELS (89 M): our check, before decoding
    p.write_bytes(png_header_only(10_000, 10_000))


def bad_big_bomb(p):                          # over twice the limit: Pillow's own error at open
    p.write_bytes(png_header_only(50_000, 50_000))


def bad_too_elongated(p):
    p.write_bytes(png_bytes(32, 6500))        # 1 : 203


BAD_FILES = [  # (how to make it, English words, Chinese words)
    (bad_not_an_image, "is not an image Pillow can read", "不是 Pillow 能读取的图像"),
    (bad_truncated, "is truncated", "被截断了"),
    (bad_empty, "is empty (0 bytes)", "是空文件（0 字节）"),
    (bad_folder, "is a folder: give the path of one image file", "是一个文件夹"),
    (bad_missing, "no such image file", "没有这个图像文件"),
    (bad_bomb, "claims 10000 x 10000 pixels, over Pillow's limit", "超过了 Pillow 的上限"),
    (bad_big_bomb, "over twice Pillow's limit", "解压炸弹"),
    (bad_too_elongated, "one side is 203 times the other", "超过了上限 200"),
]


@pytest.mark.parametrize("make, en, zh", BAD_FILES, ids=[c[0].__name__[4:] for c in BAD_FILES])
def test_bad_image_file_is_one_line_naming_it(tmp_path, make, en, zh):
    path = tmp_path / "my picture.png"
    make(path)
    with pytest.raises(QwenError) as e:
        load_image(path)
    one_line_naming(e.value, str(path), en, zh)


SMALL = [(1500, 10), (10, 1500), (31, 400), (20, 24), (1, 1), (5, 900)]      # (width, height): a side under 32


@pytest.mark.parametrize("which", ["real", "tiny"])
@pytest.mark.parametrize("size", SMALL, ids=[f"{w}x{h}" for w, h in SMALL])
def test_a_side_under_one_block_is_resized_up_as_transformers_does(tmp_path, size, which, settings_by_name):
    """A side under the merged block (32 px on Qwen3.5) is resized up, not refused: transformers' processor
    and the Qwen team's smart_resize bring the picture up to min_pixels (a 1500 x 10 strip: 3136 x 32)."""
    settings = settings_by_name[which]
    path = tmp_path / "small.png"
    picture(*size).save(path)
    assert load_image(path).size == size
    _, grid = assert_like_transformers(Image.open(path).convert("RGB"), settings)
    assert preprocess(str(path), settings)[1].tolist() == grid.tolist()
    if which == "real" and size == (1500, 10):
        assert (grid[0, 1] * 16, grid[0, 2] * 16) == (32, 3136)


def test_an_image_without_pixels_is_one_line():
    with pytest.raises(QwenError, match=r"^the image is 0 x 7 pixels: it has no pixels"):
        preprocess(Image.new("RGB", (0, 7)), REAL_SETTINGS)


def test_a_bomb_is_refused_before_decoding(tmp_path, monkeypatch):
    """With a low limit, an ordinary file over it is refused without Pillow ever decoding it."""
    from PIL import ImageFile
    path = tmp_path / "big.png"
    path.write_bytes(png_bytes(200, 100))
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10_000)
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: pytest.fail("decoded"))
    with pytest.raises(QwenError, match=r"claims 200 x 100 pixels, over Pillow's limit of 10,000"):
        load_image(path)


def test_a_huge_bomb_says_twice_the_limit_in_both_languages(tmp_path):
    """Over twice the limit, Pillow refuses at open and the size is unknown: the line says twice the limit,
    not "claims too many pixels", and the Chinese line is Chinese (not "声称有 too many 像素")."""
    path = tmp_path / "huge.png"
    bad_big_bomb(path)
    with pytest.raises(QwenError) as e:
        load_image(path)
    limit = f"{Image.MAX_IMAGE_PIXELS:,}"
    assert f"claims over twice Pillow's limit of {limit} pixels" in e.value.en, e.value.en
    assert f"超过了 Pillow 上限 {limit} 的两倍" in e.value.zh and "too many" not in e.value.zh, e.value.zh


def test_aspect_ratio_in_smart_resize_is_a_clear_error():
    with pytest.raises(QwenError, match="over 200 times"):
        smart_resize(32, 6500, 32, 65536, 16777216)
    assert math.isclose(6400 / 32, 200) and smart_resize(32, 6400, 32, 1024, 16777216) == (32, 6400)


def test_settings_dataclass_shapes():
    assert REAL_SETTINGS.factor == 32 and REAL_SETTINGS.patch_dim == 1536
    assert isinstance(REAL_SETTINGS, ImageSettings)


def test_an_exif_rotated_photo_is_turned_upright_as_transformers_load_image(tmp_path):
    """A phone photo stores its pixels sideways plus an orientation tag (6: turn 90 degrees);
    transformers' load_image (image_utils) turns it upright, and so does ours."""
    from transformers.image_utils import load_image as hf_load_image
    stored = picture(64, 40)                                              # as the sensor saw it
    exif = Image.Exif()
    exif[0x0112] = 6                                                      # Orientation: rotate 90 CW to view
    path = tmp_path / "phone.png"
    stored.save(path, exif=exif)
    ours, reference = load_image(path), hf_load_image(str(path))
    assert ours.size == reference.size == (40, 64)
    assert np.array_equal(np.asarray(ours), np.asarray(reference))
    assert preprocess(str(path), REAL_SETTINGS)[1].tolist() == preprocess(reference, REAL_SETTINGS)[1].tolist()
