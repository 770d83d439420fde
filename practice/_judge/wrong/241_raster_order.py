"""Wrong on purpose (judge --verify): rows in raster order, patch row by patch row, not block by block."""
import torch


def patchify(frames, patch_size, temporal_patch_size, merge_size):
    F, C, H, W = frames.shape
    T, P = temporal_patch_size, patch_size
    t, gh, gw = F // T, H // P, W // P
    x = frames.reshape(t, T, C, gh, P, gw, P)
    x = x.permute(0, 3, 5, 2, 1, 4, 6)                    # (t, patch row, patch col, C, T, P, P)
    return x.reshape(t * gh * gw, C * T * P * P)
