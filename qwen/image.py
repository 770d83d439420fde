"""From an image file to the rows of numbers the vision tower reads: Qwen3.5's image preprocessing.

Why each step:
- RGB: the tower's first layer has 3 input channels. A palette is looked up, greyscale copied to
  R = G = B, a transparent pixel painted over white (what a viewer shows behind it).
- Resize to multiples of 32: the tower cuts 16 x 16 patches and merges each 2 x 2 block of them into
  one token (patch * merge = `factor`). `smart_resize` keeps the aspect ratio and the pixel count
  within the checkpoint's bounds (256 x 256 .. 4096 x 4096): too few tokens say nothing, too many cost.
- Bicubic resampling, x / 255, (x - mean) / std (0.5, 0.5: [0, 255] to [-1, 1]), as in training.
- Two frames: the patch embedding is a Conv3d over 2 video frames; a still image is its own second.
- Merge-block order: the 4 patches of a 2 x 2 block are consecutive rows, so the merger joins them
  into one token with a plain reshape.

Shapes for a 448 x 448 image on the real checkpoint:
    (448, 448) RGB -> (3, 448, 448) fp32 -> (2, 3, 448, 448) frames
    -> grid (t, h, w) = (1, 28, 28) -> pixel_values (784, 3 * 2 * 16 * 16 = 1536); 784 / 4 = 196 tokens.

The reference is transformers' Qwen2VLImageProcessorPil (tests/test_image.py: equal within 1e-6), but
`load_image` keeps a 16-bit greyscale file's top byte, where convert("RGB") would clip it to white.
"""
import dataclasses
import math
import warnings
from pathlib import Path

import torch

from qwen.files import kind_of, open_file, read_json
from qwen.lang import QwenError

MAX_ASPECT_RATIO = 200                   # smart_resize's own limit (the reference raises beyond it)
MAX_MIN_PIXELS = 4096 * 4096             # the real max_pixels; a lower bound above it upsizes every picture


@dataclasses.dataclass(frozen=True)
class ImageSettings:
    """What preprocessor_config.json says: the pixel bounds and the patch geometry."""
    min_pixels: int                      # size.shortest_edge (a pixel count, despite the name)
    max_pixels: int                      # size.longest_edge
    patch_size: int
    temporal_patch_size: int
    merge_size: int
    image_mean: tuple
    image_std: tuple
    source: str = "Qwen3.5-0.8B's preprocessor_config.json"

    @property
    def factor(self):                    # both sides are multiples of this: a merged block of patches, in pixels
        return self.patch_size * self.merge_size

    @property
    def patch_dim(self):                 # values per row of pixel_values: 3 x T x P x P (1536 for the real model)
        return 3 * self.temporal_patch_size * self.patch_size * self.patch_size


REAL_SETTINGS = ImageSettings(min_pixels=65536, max_pixels=16777216, patch_size=16, temporal_patch_size=2, merge_size=2,
                              image_mean=(0.5, 0.5, 0.5), image_std=(0.5, 0.5, 0.5))   # Qwen/Qwen3.5-0.8B's file
TOWER_KEYS = (("patch_size", "patch_size"), ("temporal_patch_size", "temporal_patch_size"),
              ("merge_size", "spatial_merge_size"))              # (preprocessor_config.json, vision_config)
NORMALIZE = ("image_mean", "image_std")
DISAGREE = {  # preprocessor_config.json (or, when absent, Qwen3.5's values) against config.json's vision_config
    False: ("{file}: {key} is {have}, but config.json's vision_config.{theirs} is {want}: the two files come from "
            "different checkpoints. Download it again with the model.", "{file}：{key} 是 {have}，但 config.json 的 "
            "vision_config.{theirs} 是 {want}：这两个文件来自不同的检查点。请和模型一起重新下载它。"),
    True: ("{file} is missing, and Qwen3.5's {key} {have} (used in its place) disagrees with config.json's "
           "vision_config.{theirs} {want}. Copy the checkpoint's file into {folder}.", "缺少 {file}，而代替它的 Qwen3.5 的 "
           "{key} {have} 与 config.json 的 vision_config.{theirs} {want} 不一致。请把检查点的这个文件复制到 {folder}。")}
SIZE_KEYS = {"min_pixels": "size.shortest_edge (or min_pixels)", "max_pixels": "size.longest_edge (or max_pixels)"}


def image_settings(path=None):
    """The settings of the checkpoint folder `path` (or of the file itself), else the real checkpoint's.
    Their patch geometry must be config.json's vision_config's: otherwise the tower gets rows of the
    wrong width, an error only after the model is loaded, naming neither file."""
    if path is None:
        return REAL_SETTINGS
    file = Path(path) / "preprocessor_config.json" if kind_of(path) == "folder" else Path(path)
    settings = _read_settings(file) if kind_of(file) is not None else REAL_SETTINGS
    raw = read_json(config) if kind_of(config := file.parent / "config.json") == "file" else None
    vision = raw.get("vision_config") if isinstance(raw, dict) else None
    for ours, theirs in TOWER_KEYS if isinstance(vision, dict) else ():
        want, have = vision.get(theirs), getattr(settings, ours)
        if type(want) is int and want != have:
            raise QwenError(*DISAGREE[kind_of(file) is None], file=file, key=ours, have=have, theirs=theirs, want=want,
                            folder=file.parent)
    return settings


def _read_settings(file):
    """The ImageSettings of an existing preprocessor_config.json, every value checked."""
    raw = read_json(file)                                   # a broken file: one line naming it
    if not isinstance(raw, dict):
        raise _bad_setting(file, "the file should hold a JSON object, not a {v}", "应当是一个 JSON 对象，实际是 {v}",
                           v=type(raw).__name__)
    size = raw.get("size") if isinstance(raw.get("size"), dict) else {}
    values = {"min_pixels": raw.get("min_pixels", size.get("shortest_edge")),    # top-level keys win over size.*,
              "max_pixels": raw.get("max_pixels", size.get("longest_edge")),     # as transformers reads them
              **{key: raw.get(key) for key in ("patch_size", "temporal_patch_size", "merge_size", *NORMALIZE)}}
    for key, v in values.items():
        positive = key == "image_std"                       # std divides: its numbers must be > 0
        if v is None:
            raise _bad_setting(file, "{key} is missing", "缺少 {key}", key=SIZE_KEYS.get(key, key))
        if key in NORMALIZE and not (isinstance(v, list) and len(v) == 3 and all(
                type(x) in (int, float) and math.isfinite(x) and (x > 0 or not positive) for x in v)):
            raise _bad_setting(file, "{key} should be a list of 3 {p}numbers, not {v}", "{key} 应当是由 3 个{pz}数组成的列表，"
                               "实际是 {v}", key=key, p="positive " * positive, pz="正" * positive, v=repr(v)[:60])
        if key not in NORMALIZE and (type(v) is not int or v < 1):
            raise _bad_setting(file, "{key} should be a positive whole number, not {v!r}", "{key} 应当是正整数，实际是 "
                               "{v!r}", key=key, v=v)
    values.update({key: tuple(float(x) for x in values[key]) for key in NORMALIZE})
    low, high = values["min_pixels"], values["max_pixels"]
    if low > MAX_MIN_PIXELS:                                # a larger lower bound blows every picture up to gigabytes
        raise _bad_setting(file, "size.shortest_edge (min_pixels) should be at most {m:,} (4096 x 4096), not {v:,}",
                           "size.shortest_edge (min_pixels) 应当是不超过 {m:,}（4096 x 4096），实际是 {v:,}", m=MAX_MIN_PIXELS,
                           v=low)
    if low > high:
        raise _bad_setting(file, "size needs shortest_edge <= longest_edge, not {low} > {high}",
                           "size 应当满足 shortest_edge <= longest_edge，实际是 {low} > {high}", low=low, high=high)
    mean, std = (torch.tensor(values[key])[:, None] for key in NORMALIZE)          # (3, 1) each, fp32, where a mean
    if not ((torch.tensor([0.0, 1.0]) - mean) / std).isfinite().all():    # of 1e300 or a std of 1e-300 gives inf or nan
        raise _bad_setting(file, "image_mean / image_std should be numbers for which (x - mean) / std stays finite in "
                           "fp32", "image_mean / image_std 应当是使 (x - mean) / std 在 fp32 中保持有限的数")
    return ImageSettings(**values, source=str(file))


def _bad_setting(file, en, zh, **fields):               # one line: the file, what is wrong in it, the way out
    return QwenError("{file}: " + en + ". Download it again, or delete it to use Qwen3.5's values.",
                     "{file}：" + zh + "。请重新下载，或者删掉它，使用 Qwen3.5 的值。", file=file, **fields)


BOMB = (" (a decompression bomb, or a huge scan). It was not decoded; shrink the picture first.",
        "（解压炸弹，或超大的扫描图）。它没有被解码；请先把图片缩小。")
BAD_FILE = {  # what can be wrong with a picture: one line naming it, in both languages
    "missing": ("{path}: no such image file. Check the spelling of the path.", "{path}：没有这个图像文件。请检查路径的拼写。"),
    "folder": ("{path} is a folder: give the path of one image file.", "{path} 是一个文件夹：请给出一个图像文件的路径。"),
    "empty": ("{path} is empty (0 bytes): save or copy the picture again.", "{path} 是空文件（0 字节）：请重新保存或复制图片。"),
    "unknown": ("{path} is not an image Pillow can read (PNG, JPEG, ...).", "{path} 不是 Pillow 能读取的图像（PNG、JPEG 等）。"),
    "truncated": ("{path} is truncated ({why}): copy or download it again.", "{path} 被截断了（{why}）：请重新复制或下载。"),
    "damaged": ("{path} is a damaged image ({why}): save it again as PNG.", "{path} 是损坏的图像（{why}）：请重新保存为 PNG。"),
    "bomb": ("{path} claims {w} x {h} pixels, over Pillow's limit of {n:,}" + BOMB[0],
             "{path} 声称有 {w} x {h} 像素，超过了 Pillow 的上限 {n:,}" + BOMB[1]),
    "huge bomb": ("{path} claims over twice Pillow's limit of {n:,} pixels" + BOMB[0],
                  "{path} 声称的像素数超过了 Pillow 上限 {n:,} 的两倍" + BOMB[1]),
    "no pixels": ("{path} is {w} x {h} pixels: it has no pixels to look at.", "{path} 是 {w} x {h} 像素：没有可看的像素。"),
    "elongated": ("{path} is {w} x {h} pixels: one side is {r:.0f} times the other, over {m} times. Crop it.",
                  "{path} 是 {w} x {h} 像素：一条边是另一条的 {r:.0f} 倍，超过了上限 {m}。请裁剪。"),
}


def load_image(path):
    """The picture in the file `path` as a Pillow RGB image, every check in one place, before decoding:
    Image.open reads only the header, so a decompression bomb (a few kB claiming gigabytes of pixels) is
    refused before any memory is spent. A photo whose EXIF tag says "rotated" (phones store the pixels
    sideways) is turned upright, as transformers' load_image does: the model sees what a viewer shows."""
    from PIL import Image, ImageOps, UnidentifiedImageError
    path = Path(path)
    if (kind := kind_of(path)) != "file":
        raise QwenError(*BAD_FILE["missing" if kind is None else "folder"], path=path)
    with open_file(path) as f:                              # permissions, FIFOs, link loops: one line each
        if f.seek(0, 2) == 0:
            raise QwenError(*BAD_FILE["empty"], path=path)
        f.seek(0)
        try:
            with warnings.catch_warnings():                 # our own size check below replaces the warning
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                image = Image.open(f)
            if Image.MAX_IMAGE_PIXELS and image.width * image.height > Image.MAX_IMAGE_PIXELS:
                raise QwenError(*BAD_FILE["bomb"], path=path, w=image.width, h=image.height, n=Image.MAX_IMAGE_PIXELS)
            check_size(image.width, image.height, path)
            image.load()                                    # decode now, while the file is open
        except QwenError:
            raise
        except Image.DecompressionBombError:                # over twice the limit: Pillow refuses at open
            raise QwenError(*BAD_FILE["huge bomb"], path=path, n=Image.MAX_IMAGE_PIXELS or 0) from None
        except UnidentifiedImageError:
            raise QwenError(*BAD_FILE["unknown"], path=path) from None
        except Exception as e:                              # a header, or data, the decoder cannot parse
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise QwenError(*BAD_FILE["truncated" if "truncated" in why else "damaged"], path=path, why=why) from None
        ImageOps.exif_transpose(image, in_place=True)
    return to_rgb(image, top_byte=True)


def check_size(width, height, name="the image"):
    """Refuse a picture with no pixels, or one side over 200 times the other (smart_resize's limit)."""
    if min(width, height) == 0:
        raise QwenError(*BAD_FILE["no pixels"], path=name, w=width, h=height)
    if max(width, height) > MAX_ASPECT_RATIO * min(width, height):
        raise QwenError(*BAD_FILE["elongated"], path=name, w=width, h=height, r=max(width, height) / min(width, height),
                        m=MAX_ASPECT_RATIO)


def to_rgb(image, top_byte=False):
    """Any Pillow image as RGB, the reference's way: transparency (an alpha band, a palette's or greyscale's
    transparent colour) over white, the rest by convert("RGB"); top_byte: 16 bits as value // 256, not clipped."""
    from PIL import Image
    if top_byte and (image.mode.startswith("I;16") or image.mode == "I" and image.getextrema()[1] > 255):
        import numpy as np
        values = np.asarray(image.convert("I"), dtype=np.int64)
        image = Image.fromarray((values.clip(0, 65535) >> 8).astype(np.uint8), mode="L")
    if "A" in image.getbands() or image.info.get("transparency") is not None:
        rgba = image.convert("RGBA")
        return Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba).convert("RGB")
    return image.convert("RGB")


def smart_resize(height, width, factor, min_pixels, max_pixels):
    """(height, width) rounded to the nearest multiples of `factor`. If that is over max_pixels, both sides
    shrink by beta = sqrt(h * w / max_pixels) and round DOWN, so the result stays under the bound; if under
    min_pixels, they grow by sqrt(min_pixels / (h * w)) and round UP, so it reaches the bound."""
    check_size(width, height)
    h, w = round(height / factor) * factor, round(width / factor) * factor
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h, w = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h, w


def resize_and_normalize(image, settings):
    """RGB image -> (3, H, W) fp32: bicubic resize to smart_resize's size, x / 255, (x - mean) / std.
    x / 255 in fp32 gives the bits of the reference's x * (1/255) in fp64 for all 256 levels."""
    import numpy as np
    from PIL import Image
    h, w = smart_resize(image.height, image.width, settings.factor, settings.min_pixels, settings.max_pixels)
    resized = image.resize((w, h), resample=Image.BICUBIC)               # Pillow takes (width, height)
    x = torch.from_numpy(np.asarray(resized).copy()).permute(2, 0, 1).float().div_(255)   # (3, H, W) in [0, 1]
    mean, std = (torch.tensor(v)[:, None, None] for v in (settings.image_mean, settings.image_std))   # fp32
    return x.sub_(mean).div_(std)                                        # (3, H, W)


def repeat_frames(image, temporal_patch_size):
    """(C, H, W) -> (T, C, H, W): a still image as T identical frames for the Conv3d patch embedding."""
    return image.unsqueeze(0).expand(temporal_patch_size, *image.shape)


def patchify(frames, patch_size, temporal_patch_size, merge_size):
    """(F, C, H, W) frames -> (patches, C * T * P * P) rows, T = temporal_patch_size, in merge-block order:
    block by block of merge x merge patches, inside a block its patches in raster order; each row holds
    channel, then frame, then the P x P pixels. F / T groups of frames come one after the other."""
    F, C, H, W = frames.shape
    T, P, m = temporal_patch_size, patch_size, merge_size
    t, gh, gw = F // T, H // P, W // P
    x = frames.reshape(t, T, C, gh // m, m, P, gw // m, m, P)
    x = x.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)        # (t, blocks down, blocks across, row, column in block, C, T, P, P)
    return x.reshape(t * gh * gw, C * T * P * P)                         # (patches, C*T*P*P)


def preprocess(image_or_images, path=None):
    """One image or a list of them (Pillow images or file paths) for the checkpoint in folder `path`
    (or its ImageSettings) -> (pixel_values (patches, C*T*P*P) fp32, grid_thw (images, 3) int64): the patches
    in order, grid_thw[i] = (t, h, w) image i's patches in time, down, across (t * h * w / merge^2 tokens)."""
    settings = path if isinstance(path, ImageSettings) else image_settings(path)
    images = image_or_images if isinstance(image_or_images, (list, tuple)) else [image_or_images]
    rows, grids = [], []
    for image in images:
        if isinstance(image, (str, Path)):
            image = load_image(image)
        else:
            check_size(image.width, image.height, getattr(image, "filename", "") or "the image")
        x = resize_and_normalize(to_rgb(image), settings)                 # (3, H, W)
        frames = repeat_frames(x, settings.temporal_patch_size)          # (T, 3, H, W)
        rows.append(patchify(frames, settings.patch_size, settings.temporal_patch_size, settings.merge_size))
        grids.append([1, x.shape[1] // settings.patch_size, x.shape[2] // settings.patch_size])
    if not rows:
        raise QwenError("No image was given to preprocess.", "没有给 preprocess 任何图像。")
    return torch.cat(rows), torch.tensor(grids, dtype=torch.int64)       # (patches, C*T*P*P), (images, 3)
