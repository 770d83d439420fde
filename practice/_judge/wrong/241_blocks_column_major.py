"""Wrong on purpose (judge --verify): the merge blocks taken column by column (block column before block row)."""
import torch


def patchify(frames, patch_size, temporal_patch_size, merge_size):
    F, C, H, W = frames.shape
    T, P, m = temporal_patch_size, patch_size, merge_size
    t, gh, gw = F // T, H // P, W // P
    x = frames.reshape(t, T, C, gh // m, m, P, gw // m, m, P)
    x = x.permute(0, 6, 3, 4, 7, 2, 1, 5, 8)         # (t, block col, block row, ...): column-major blocks
    return x.reshape(t * gh * gw, C * T * P * P)
