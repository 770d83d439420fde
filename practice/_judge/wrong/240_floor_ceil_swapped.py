"""Wrong on purpose (judge --verify): floor and ceil swapped between the two bounds."""
import math


def smart_resize(height, width, factor, min_pixels, max_pixels):
    h = round(height / factor) * factor
    w = round(width / factor) * factor
    if h * w > max_pixels:                                   # too many pixels: shrink (rounded up: wrong)
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, math.ceil(height / beta / factor) * factor)
        w = max(factor, math.ceil(width / beta / factor) * factor)
    elif h * w < min_pixels:                                 # too few: grow (rounded down: wrong)
        beta = math.sqrt(min_pixels / (height * width))
        h = math.floor(height * beta / factor) * factor
        w = math.floor(width * beta / factor) * factor
    return h, w
