"""Equivalent form (judge --verify): the multiples counted first (n = round(side / factor)), then scaled."""
import math


def smart_resize(height, width, factor, min_pixels, max_pixels):
    nh, nw = round(height / factor), round(width / factor)
    if nh * nw * factor * factor > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        nh, nw = max(1, math.floor(height / beta / factor)), max(1, math.floor(width / beta / factor))
    elif nh * nw * factor * factor < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        nh, nw = math.ceil(height * beta / factor), math.ceil(width * beta / factor)
    return nh * factor, nw * factor
