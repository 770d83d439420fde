"""The picture chapters 10 and 11 look at when no --image is given, drawn here with Pillow.

Drawn, not downloaded: nothing to fetch offline, no licence to check, and the same pixels on
every run (only Pillow's drawing primitives and its built-in bitmap font, no system font).
Shapes with plain colours and a short word give the tower something to tell apart: where a
shape is (the position table, the 2D rotary positions), its colour (the patch embedding), and
letters (fine detail inside a few patches).

    from engine.pictures import demo_image, DEMO_WORD
    image = demo_image()                  # a 448 x 448 RGB PIL image
"""

DEMO_SIZE = (448, 448)          # width, height: 28 x 28 patches of 16 px, 14 x 14 tokens on Qwen3.5-0.8B
DEMO_WORD = "CAT"               # the short word written under the shapes
BACKGROUND = (245, 245, 240)    # off-white
SHAPES = (                      # (what, colour name, RGB, box as fractions of the width and height)
    ("square", "red", (220, 30, 30), (0.08, 0.08, 0.40, 0.40)),
    ("circle", "blue", (30, 70, 220), (0.56, 0.08, 0.92, 0.44)),
    ("triangle", "green", (30, 160, 60), (0.30, 0.46, 0.70, 0.76)),
)
WORD_BOX = (0.20, 0.78, 0.80, 0.96)     # where the word goes (fractions), in black


def demo_image(size=DEMO_SIZE):
    """A white picture with a red square, a blue circle, a green triangle and the word "CAT".

    size: (width, height) in pixels; the shapes scale with it. Deterministic: the same Pillow
    draws the same bytes (see `describe()` for what is where)."""
    from PIL import Image, ImageDraw

    width, height = size
    image = Image.new("RGB", (width, height), BACKGROUND)
    draw = ImageDraw.Draw(image)
    for what, _, rgb, box in SHAPES:
        x0, y0, x1, y1 = _pixels(box, width, height)
        if what == "square":
            draw.rectangle((x0, y0, x1, y1), fill=rgb)
        elif what == "circle":
            draw.ellipse((x0, y0, x1, y1), fill=rgb)
        else:
            draw.polygon(((x0 + x1) // 2, y0, x1, y1, x0, y1), fill=rgb)
    _draw_word(image, DEMO_WORD, _pixels(WORD_BOX, width, height))
    return image


def describe():
    """What the picture holds, as (what, colour, box in fractions): for the chapters' text only."""
    return [(what, colour, box) for what, colour, _, box in SHAPES] + [(f"the word {DEMO_WORD!r}", "black", WORD_BOX)]


def _pixels(box, width, height):
    x0, y0, x1, y1 = box
    return round(x0 * width), round(y0 * height), round(x1 * width), round(y1 * height)


def _draw_word(image, word, box):
    """The word in Pillow's built-in bitmap font, scaled up by whole pixels (NEAREST) to fill the
    box's height: a bitmap font looks the same everywhere, unlike a system or FreeType font."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default_imagefont() if hasattr(ImageFont, "load_default_imagefont") \
        else ImageFont.load_default()
    left, top, right, bottom = ImageDraw.Draw(image).textbbox((0, 0), word, font=font)
    mask = Image.new("L", (right - left, bottom - top), 0)
    ImageDraw.Draw(mask).text((-left, -top), word, fill=255, font=font)
    x0, y0, x1, y1 = box
    scale = max(1, min((x1 - x0) // mask.width, (y1 - y0) // mask.height))
    mask = mask.resize((mask.width * scale, mask.height * scale), Image.NEAREST)
    at = (x0 + (x1 - x0 - mask.width) // 2, y0 + (y1 - y0 - mask.height) // 2)
    image.paste((0, 0, 0), (*at, at[0] + mask.width, at[1] + mask.height), mask)
