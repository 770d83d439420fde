"""Wrong on purpose (judge --verify): tests the bounds on the original height * width, not on the rounded sizes."""
import math


def smart_resize(height, width, factor, min_pixels, max_pixels):
    if height * width > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        return (max(factor, math.floor(height / beta / factor) * factor),
                max(factor, math.floor(width / beta / factor) * factor))
    if height * width < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        return math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return round(height / factor) * factor, round(width / factor) * factor
