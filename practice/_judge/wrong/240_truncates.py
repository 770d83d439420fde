"""Wrong on purpose (judge --verify): the first step truncates (//) instead of rounding to the nearest multiple."""
import math


def smart_resize(height, width, factor, min_pixels, max_pixels):
    h = height // factor * factor
    w = width // factor * factor
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return h, w
