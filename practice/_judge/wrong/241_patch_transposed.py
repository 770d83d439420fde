"""Wrong on purpose (judge --verify): each patch's pixel rows and columns transposed."""
import torch


def patchify(frames, patch_size, temporal_patch_size, merge_size):
    F, C, H, W = frames.shape
    T, P, m = temporal_patch_size, patch_size, merge_size
    t, gh, gw = F // T, H // P, W // P
    x = frames.reshape(t, T, C, gh // m, m, P, gw // m, m, P)
    x = x.permute(0, 3, 6, 4, 7, 2, 1, 8, 5)         # (..., C, T, pixel column, pixel row)
    return x.reshape(t * gh * gw, C * T * P * P)
