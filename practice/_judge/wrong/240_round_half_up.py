"""Wrong on purpose (judge --verify): step 1 rounds an exact half up (floor(x + 0.5)) instead of to even (Python's round)."""
import math


def smart_resize(height, width, factor, min_pixels, max_pixels):
    h = math.floor(height / factor + 0.5) * factor
    w = math.floor(width / factor + 0.5) * factor
    if h * w > max_pixels:                                   # too many pixels: shrink, round down
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < min_pixels:                                 # too few: grow, round up
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return h, w
