"""From an image file to the rows of numbers the vision tower reads: Qwen3.5's image preprocessing.

Why each step:
- RGB. The tower's first layer has 3 input channels, so every picture becomes 3 channels of
  8 bits: a palette is looked up, greyscale is copied to R = G = B, CMYK is converted, and a
  transparent pixel is painted over white (transparency holds no colour; white is what a viewer
  shows behind it). These are the conversions of transformers' processor, step for step.
- Resize to multiples of 32. The tower cuts the image into 16 x 16 patches and later merges each
  2 x 2 block of patches into one token, so both sides must be multiples of patch * merge = 32
  (the `factor`). `smart_resize` picks the nearest such size that keeps the aspect ratio and
  keeps the pixel count within the checkpoint's bounds (preprocessor_config.json: at least
  256 x 256, at most 4096 x 4096 pixels for Qwen3.5-0.8B): too small an image gives too few
  tokens to say anything about, too large a one too many to afford.
- Bicubic resampling (Pillow), then x / 255 and (x - mean) / std: the numbers the checkpoint was
  trained on (mean = std = 0.5 maps [0, 255] to [-1, 1]).
- Two frames. The patch embedding is a Conv3d that also looks across 2 video frames at a time
  (temporal_patch_size = 2); a still image is its own second frame.
- Merge-block order. The rows are not in raster order (row by row of patches): the 4 patches of
  each 2 x 2 block come one after another, so that the merger later joins 4 neighbouring rows
  into one token with a plain reshape.

Shapes for a 448 x 448 image on the real checkpoint:
    (448, 448) RGB -> (3, 448, 448) fp32 -> (2, 3, 448, 448) frames
    -> grid (t, h, w) = (1, 28, 28) -> pixel_values (784, 3 * 2 * 16 * 16 = 1536); 784 / 4 = 196 tokens.

The reference is transformers' Qwen2VLImageProcessorPil (the PIL backend, so torchvision is
never needed); tests/test_image.py checks that the values agree within 1e-6 on many sizes and
modes. One deliberate difference, in `load_image` only: a 16-bit greyscale file is brought to
8 bits (its top byte), where Pillow's convert("RGB") would clip every value above 255 and give
an almost white picture. `preprocess` on an image already opened keeps the reference's rule.
"""
import dataclasses
import math
import warnings
from pathlib import Path

from qwen.files import kind_of, open_file, read_json
from qwen.lang import QwenError

CONFIG_NAME = "preprocessor_config.json"
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
    def factor(self):
        """Both sides are multiples of this: one merged 2 x 2 block of patches, in pixels."""
        return self.patch_size * self.merge_size

    @property
    def patch_dim(self):
        """Values per row of pixel_values: channels x frames x patch x patch (1536 for the real model)."""
        return 3 * self.temporal_patch_size * self.patch_size * self.patch_size


# The real checkpoint's values, used where a folder has no preprocessor_config.json. Source:
# Qwen/Qwen3.5-0.8B's preprocessor_config.json on the Hugging Face Hub (size {longest_edge:
# 16777216, shortest_edge: 65536}, patch_size 16, temporal_patch_size 2, merge_size 2,
# image_mean = image_std = [0.5, 0.5, 0.5]; found through the search tool, the Hub page of a
# verbatim duplicate, huggingface.co/MurphyA/Qwen3.5-0.8B, and Qwen3.5-2B-Base's identical file).
REAL_SETTINGS = ImageSettings(min_pixels=65536, max_pixels=16777216, patch_size=16, temporal_patch_size=2,
                              merge_size=2, image_mean=(0.5, 0.5, 0.5), image_std=(0.5, 0.5, 0.5))


# ---------------------------------------------------------------------------- settings

def image_settings(path=None):
    """The settings of the checkpoint folder `path` (its preprocessor_config.json), else the real
    checkpoint's. Accepts the file itself too, and None (the real values)."""
    if path is None:
        return REAL_SETTINGS
    path = Path(path)
    file = path / CONFIG_NAME if kind_of(path) == "folder" else path
    settings = _read_settings(file) if kind_of(file) is not None else REAL_SETTINGS
    _agree_with_tower(file, settings)
    return settings


def _read_settings(file):
    """The ImageSettings of an existing preprocessor_config.json, every value checked."""
    raw = read_json(file)                                   # a broken file: one line naming it
    if not isinstance(raw, dict):
        raise QwenError("{file} should hold a JSON object, but it holds a {kind}. Download it again, or delete it to "
                        "use Qwen3.5's values.",
                        "{file} 应当是一个 JSON 对象，实际是 {kind}。请重新下载，或者删掉它，使用 Qwen3.5 的值。",
                        file=file, kind=type(raw).__name__)
    size = raw.get("size") if isinstance(raw.get("size"), dict) else {}
    # Top-level min_pixels / max_pixels win over size.*, as transformers' processor reads them.
    low = raw.get("min_pixels", size.get("shortest_edge"))
    high = raw.get("max_pixels", size.get("longest_edge"))
    values = {"min_pixels": low, "max_pixels": high}
    for key in ("patch_size", "temporal_patch_size", "merge_size"):
        values[key] = raw.get(key)
    for key, value in values.items():
        if value is None:
            name = {"min_pixels": "size.shortest_edge (or min_pixels)",
                    "max_pixels": "size.longest_edge (or max_pixels)"}.get(key, key)
            raise QwenError("{file}: {name} is missing. The file is incomplete: download it again, or delete it "
                            "to use Qwen3.5's values.",
                            "{file}：缺少 {name}。文件不完整：请重新下载，或者删掉它，使用 Qwen3.5 的值。",
                            file=file, name=name)
        if type(value) is not int or value < 1:
            raise _bad_setting(file, key, ("a positive whole number", "正整数"), repr(value))
    if values["min_pixels"] > MAX_MIN_PIXELS:
        raise _bad_setting(file, "size.shortest_edge (min_pixels)",
                           ("at most {:,} (4096 x 4096, the real checkpoint's largest image: a larger lower bound "
                            "would blow every picture up to gigabytes)".format(MAX_MIN_PIXELS),
                            "不超过 {:,}（4096 x 4096，真实检查点的最大图像：更大的下限会把每张图片放大到几 GB）"
                            .format(MAX_MIN_PIXELS)), f"{values['min_pixels']:,}")
    if values["min_pixels"] > values["max_pixels"]:
        raise _bad_setting(file, "size", ("shortest_edge <= longest_edge", "满足 shortest_edge <= longest_edge"),
                           f"{values['min_pixels']} > {values['max_pixels']}")
    for key in ("image_mean", "image_std"):
        value = raw.get(key, REAL_SETTINGS.image_mean if key == "image_mean" else REAL_SETTINGS.image_std)
        if (not isinstance(value, list) or len(value) != 3
                or not all(type(v) in (int, float) and math.isfinite(v) for v in value)
                or (key == "image_std" and not all(v > 0 for v in value))):
            wanted = (("a list of 3 positive numbers", "由 3 个正数组成的列表") if key == "image_std"
                      else ("a list of 3 numbers", "由 3 个数组成的列表"))
            raise _bad_setting(file, key, wanted, repr(value)[:60])
        values[key] = tuple(float(v) for v in value)
    if not _finite_in_fp32(values["image_mean"], values["image_std"]):
        raise _bad_setting(file, "image_mean / image_std", ("numbers for which (x - mean) / std stays finite in fp32",
                                                            "使 (x - mean) / std 在 fp32 中保持有限的数"),
                           f"{values['image_mean']} / {values['image_std']}"[:80])
    return ImageSettings(**values, source=str(file))


def _finite_in_fp32(mean, std):
    """(x - mean) / std is computed in fp32: a mean of 1e300 or a std of 1e-300 (each a valid JSON
    number) gives inf or nan there. The extremes are at x = 0 and x = 1, the normalization being linear."""
    import torch
    x = torch.tensor([[0.0], [1.0]])                                    # (2, 1): the extreme pixels
    return bool(((x - torch.tensor([mean])) / torch.tensor([std])).isfinite().all())


TOWER_KEYS = (("patch_size", "patch_size"), ("temporal_patch_size", "temporal_patch_size"),
              ("merge_size", "spatial_merge_size"))              # (preprocessor_config.json, vision_config)


def _agree_with_tower(file, settings):
    """The patch geometry must be the tower's, config.json's vision_config in the same folder.

    Otherwise the tower receives rows of the wrong width, and the error would come only after the
    model was loaded, naming neither file (and a huge temporal_patch_size would first allocate
    gigabytes). No config.json, or one without a vision_config: nothing to compare."""
    config = file.parent / "config.json"
    if kind_of(config) != "file":
        return
    raw = read_json(config)
    vision = raw.get("vision_config") if isinstance(raw, dict) else None
    if not isinstance(vision, dict):
        return
    for ours, theirs in TOWER_KEYS:
        want, have = vision.get(theirs), getattr(settings, ours)
        if type(want) is not int or want == have:
            continue
        fields = dict(file=file, key=ours, have=have, theirs=theirs, want=want, folder=file.parent)
        if kind_of(file) is None:
            raise QwenError("{file} is missing, and Qwen3.5's {key} {have} (used in its place) disagrees with "
                            "config.json's vision_config.{theirs} {want}. Copy this checkpoint's "
                            "preprocessor_config.json into {folder}.",
                            "缺少 {file}，而代替它的 Qwen3.5 的 {key} {have} 与 config.json 的 vision_config.{theirs} "
                            "{want} 不一致。请把这个检查点的 preprocessor_config.json 复制到 {folder}。", **fields)
        raise QwenError("{file}: {key} is {have}, but config.json's vision_config.{theirs} is {want}: the two files "
                        "come from different checkpoints. Download preprocessor_config.json again with the model.",
                        "{file}：{key} 是 {have}，但 config.json 的 vision_config.{theirs} 是 {want}：这两个文件来自"
                        "不同的检查点。请和模型一起重新下载 preprocessor_config.json。", **fields)


def _bad_setting(file, key, wanted, value):
    """`wanted` is an (English, Chinese) pair."""
    fields = dict(file=file, key=key, value=value)
    return QwenError("{file}: {key} should be {wanted}, but it is {value}. Download the file again, or delete it "
                     "to use Qwen3.5's values.".format(wanted=wanted[0], **fields),
                     "{file}：{key} 应当是{wanted}，实际是 {value}。请重新下载这个文件，或者删掉它，使用 Qwen3.5 的值。"
                     .format(wanted=wanted[1], **fields))


# ---------------------------------------------------------------------------- loading

def load_image(path, settings=None):
    """The picture in the file `path` as a Pillow RGB image, checked before it is decoded.

    The header is read first (Image.open is lazy), so a file claiming more pixels than Pillow's
    MAX_IMAGE_PIXELS (a decompression bomb: a few kB that would unpack to gigabytes) is refused
    before any memory is spent, and so are sizes the model cannot use (`check_size`).

    A photo whose EXIF data says "rotated" (most phone cameras store the pixels sideways and an
    orientation tag) is turned upright, as transformers' load_image does: the model should see
    what the learner sees in a viewer, not the picture lying on its side."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    path = Path(path)
    kind = kind_of(path)
    if kind is None:
        raise QwenError("{path}: no such image file. Check the spelling of the path.",
                        "{path}：没有这个图像文件。请检查路径的拼写。", path=path)
    if kind == "folder":
        raise QwenError("{path} is a folder: give the path of one image file (PNG, JPEG, ...).",
                        "{path} 是一个文件夹：请给出一个图像文件（PNG、JPEG 等）的路径。", path=path)
    with open_file(path) as f:                              # permissions, FIFOs, link loops: one line each
        if f.seek(0, 2) == 0:
            raise QwenError("{path} is empty (0 bytes): it holds no image. Save or copy the picture again.",
                            "{path} 是空文件（0 字节）：里面没有图像。请重新保存或复制这张图片。", path=path)
        f.seek(0)
        try:
            with warnings.catch_warnings():                 # our own size check below replaces the warning
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                image = Image.open(f)
        except Image.DecompressionBombError:
            raise _bomb(path, None) from None
        except UnidentifiedImageError:
            raise QwenError("{path} is not an image Pillow can read (PNG, JPEG, GIF, BMP, WebP, TIFF, ...). "
                            "Give the path of a picture file.",
                            "{path} 不是 Pillow 能读取的图像（PNG、JPEG、GIF、BMP、WebP、TIFF 等）。请给出图片文件的路径。",
                            path=path) from None
        except Exception as e:                              # a header the decoder cannot parse
            raise _broken(path, e) from None
        limit = Image.MAX_IMAGE_PIXELS
        if limit and image.width * image.height > limit:
            raise _bomb(path, image.size)
        check_size(image.width, image.height, (settings or REAL_SETTINGS).factor, path)
        try:
            image.load()                                    # decode now, while the file is open
        except Exception as e:                              # truncated data, a corrupt stream
            raise _broken(path, e) from None
        ImageOps.exif_transpose(image, in_place=True)       # a phone photo upright, as a viewer shows it
    if image.mode in ("I;16", "I;16L", "I;16B", "I;16N") or (image.mode == "I" and image.getextrema()[1] > 255):
        image = _to_8_bits(image)
    return to_rgb(image)


def _to_8_bits(image):
    """A 16-bit greyscale image as 8-bit 'L' (value // 256): how it looks, not clipped at 255."""
    import numpy as np
    from PIL import Image
    values = np.asarray(image.convert("I"), dtype=np.int64)
    return Image.fromarray((values.clip(0, 65535) >> 8).astype(np.uint8), mode="L")


def check_size(width, height, factor, name="the image"):
    """Refuse images the model cannot use: one side over 200 times the other (smart_resize's limit;
    a side of 0 pixels too). A side under `factor` pixels is no reason: smart_resize brings the
    picture up to min_pixels, so a 1500 x 10 strip becomes 3136 x 32 on Qwen3.5, as transformers'
    processor and the Qwen team's own smart_resize make it. (`factor` is kept for the callers.)"""
    if min(width, height) == 0:
        raise QwenError("{name} is {w} x {h} pixels: it has no pixels to look at. Use another picture.",
                        "{name} 是 {w} x {h} 像素：没有可看的像素。请换一张图片。", name=name, w=width, h=height)
    if max(width, height) > MAX_ASPECT_RATIO * min(width, height):
        raise QwenError("{name} is {w} x {h} pixels: one side is {r:.0f} times the other, over the limit of {m}. "
                        "Crop it to a less elongated picture.",
                        "{name} 是 {w} x {h} 像素：一条边是另一条的 {r:.0f} 倍，超过了上限 {m}。请把它裁剪得不那么细长。",
                        name=name, w=width, h=height, r=max(width, height) / min(width, height), m=MAX_ASPECT_RATIO)


def _bomb(path, size):
    """Pillow refuses at open a file claiming over twice its limit (`size` None: we never see the
    size); one under that but over the limit reaches our own check, which knows the size."""
    from PIL import Image
    if size is None:
        return QwenError("{path} claims over twice Pillow's limit of {n:,} pixels (a decompression bomb, or a huge "
                         "scan). It was not decoded; shrink the picture first.",
                         "{path} 声称的像素数超过了 Pillow 上限 {n:,} 的两倍（解压炸弹，或超大的扫描图）。它没有被解码；"
                         "请先把图片缩小。", path=path, n=Image.MAX_IMAGE_PIXELS or 0)
    count_en = count_zh = f" {size[0]} x {size[1]} "
    return QwenError("{path} claims{ce}pixels, over Pillow's limit of {n:,} (a decompression bomb, or a huge scan). "
                     "It was not decoded; shrink the picture first.",
                     "{path} 声称有{cz}像素，超过了 Pillow 的上限 {n:,}（解压炸弹，或超大的扫描图）。它没有被解码；"
                     "请先把图片缩小。", path=path, ce=count_en, cz=count_zh, n=Image.MAX_IMAGE_PIXELS or 0)


def _broken(path, e):
    why = str(e).splitlines()[0] if str(e) else type(e).__name__
    if "truncated" in why:
        return QwenError("{path} is truncated ({why}): the file ends before the picture does. Copy or download it "
                         "again.",
                         "{path} 被截断了（{why}）：文件在图像结束之前就结束了。请重新复制或下载它。", path=path, why=why)
    return QwenError("{path} is a damaged image ({why}). Open it in an image viewer, save it again as PNG or JPEG.",
                     "{path} 是损坏的图像（{why}）。请用看图软件打开，重新保存为 PNG 或 JPEG。", path=path, why=why)


def to_rgb(image):
    """Any Pillow image as RGB, the reference's way: transparency (an alpha band, or a palette's or
    greyscale's transparent colour) painted over white, everything else through convert("RGB")."""
    from PIL import Image
    if "A" in image.getbands() or image.info.get("transparency") is not None:
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return image.convert("RGB")


# ---------------------------------------------------------------------------- resizing

def smart_resize(height, width, factor, min_pixels, max_pixels):
    """(height, width) rounded to multiples of `factor`, the pixel count kept within the bounds.

    First each side is rounded to the nearest multiple. If that is too many pixels, both sides
    shrink by the same ratio beta = sqrt(h * w / max_pixels) and are rounded DOWN (floor), so the
    result stays under max_pixels; if too few, they grow by sqrt(min_pixels / (h * w)) and are
    rounded UP (ceil), so it reaches min_pixels. (Rounding to nearest there could land on the
    wrong side of the bound.)"""
    if max(height, width) > MAX_ASPECT_RATIO * min(height, width):
        raise QwenError("An image of {h} x {w} pixels: one side is over {m} times the other; crop it.",
                        "一张 {h} x {w} 像素的图像：一条边超过另一条的 {m} 倍；请裁剪。", h=height, w=width,
                        m=MAX_ASPECT_RATIO)
    h = round(height / factor) * factor
    w = round(width / factor) * factor
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return h, w


def resize_and_normalize(image, settings):
    """RGB image -> (3, H, W) fp32: bicubic resize to smart_resize's size, x / 255, (x - mean) / std.

    x / 255 in fp32: the reference computes x * (1/255) in fp64 and rounds to fp32, which gives the
    same bits for each of the 256 levels (tests/test_image.py checks all of them) at a fifth of the
    time. The normalization is in fp32, as the reference's, so the values agree to the last bit."""
    import numpy as np
    import torch
    from PIL import Image
    s = settings
    h, w = smart_resize(image.height, image.width, s.factor, s.min_pixels, s.max_pixels)
    resized = image.resize((w, h), resample=Image.BICUBIC)               # Pillow takes (width, height)
    pixels = torch.from_numpy(np.asarray(resized).copy())                # (H, W, 3) uint8
    x = pixels.permute(2, 0, 1).float().div_(255)                        # (3, H, W) in [0, 1]
    mean = torch.tensor(s.image_mean, dtype=torch.float32)[:, None, None]
    std = torch.tensor(s.image_std, dtype=torch.float32)[:, None, None]
    return x.sub_(mean).div_(std)                                        # (3, H, W)


# ---------------------------------------------------------------------------- patches

def repeat_frames(image, temporal_patch_size):
    """(C, H, W) -> (T, C, H, W): a still image as T identical frames for the Conv3d patch embedding."""
    return image.unsqueeze(0).expand(temporal_patch_size, *image.shape)


def patchify(frames, patch_size, temporal_patch_size, merge_size):
    """(F, C, H, W) frames -> (patches, C * T * P * P) rows in merge-block order, with T = temporal_patch_size.

    Row order: block by block of merge x merge patches (blocks in raster order), and inside a block
    its patches in raster order; each row holds channel, then frame, then the P x P pixels. With F
    frames there are t = F / T groups of frames, one after the other."""
    F, C, H, W = frames.shape
    T, P, m = temporal_patch_size, patch_size, merge_size
    t, gh, gw = F // T, H // P, W // P
    x = frames.reshape(t, T, C, gh // m, m, P, gw // m, m, P)
    # (t, blocks down, blocks across, row in block, column in block, C, T, P, P)
    x = x.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return x.reshape(t * gh * gw, C * T * P * P)                         # (patches, C*T*P*P)


def preprocess(image_or_images, path=None):
    """One image or a list of them (Pillow images or file paths) for the checkpoint in folder `path`
    -> (pixel_values (patches, C*T*P*P) fp32, grid_thw (images, 3) int64).

    The images' patches are concatenated in order; grid_thw[i] = (t, h, w) counts image i's patches
    in time, down and across (t = 1 for a still image), so image i has t * h * w rows and, after
    the merger, t * h * w / merge^2 tokens."""
    import torch
    settings = path if isinstance(path, ImageSettings) else image_settings(path)
    images = image_or_images if isinstance(image_or_images, (list, tuple)) else [image_or_images]
    rows, grids = [], []
    for image in images:
        if isinstance(image, (str, Path)):
            image = load_image(image, settings)
        else:
            check_size(image.width, image.height, settings.factor, getattr(image, "filename", "") or "the image")
        x = resize_and_normalize(to_rgb(image), settings)                 # (3, H, W)
        frames = repeat_frames(x, settings.temporal_patch_size)          # (T, 3, H, W)
        rows.append(patchify(frames, settings.patch_size, settings.temporal_patch_size, settings.merge_size))
        grids.append([1, x.shape[1] // settings.patch_size, x.shape[2] // settings.patch_size])
    if not rows:
        raise QwenError("No image was given to preprocess.", "没有给 preprocess 任何图像。")
    return torch.cat(rows), torch.tensor(grids, dtype=torch.int64)       # (patches, C*T*P*P), (images, 3)
