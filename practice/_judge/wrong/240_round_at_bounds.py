"""Wrong on purpose (judge --verify): rounds to nearest after scaling, at both bounds."""
import math


def smart_resize(height, width, factor, min_pixels, max_pixels):
    h = round(height / factor) * factor
    w = round(width / factor) * factor
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, round(height / beta / factor) * factor)
        w = max(factor, round(width / beta / factor) * factor)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = round(height * beta / factor) * factor
        w = round(width * beta / factor) * factor
    return h, w
