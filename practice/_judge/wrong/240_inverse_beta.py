"""Wrong on purpose (judge --verify): each side is multiplied by 1 / beta instead of divided by beta."""
import math


def smart_resize(height, width, factor, min_pixels, max_pixels):
    h = round(height / factor) * factor
    w = round(width / factor) * factor
    if h * w > max_pixels:                                   # too many pixels: shrink, round down
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height * (1 / beta) / factor) * factor)
        w = max(factor, math.floor(width * (1 / beta) / factor) * factor)
    elif h * w < min_pixels:                                 # too few: grow, round up
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return h, w
