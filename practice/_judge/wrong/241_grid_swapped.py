"""Wrong on purpose (judge --verify): gh and gw swapped in the reshape."""
import torch


def patchify(frames, patch_size, temporal_patch_size, merge_size):
    F, C, H, W = frames.shape
    T, P, m = temporal_patch_size, patch_size, merge_size
    t, gh, gw = F // T, H // P, W // P
    x = frames.reshape(t, T, C, gw // m, m, P, gh // m, m, P)
    x = x.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)         # (t, block row, block col, row in block, col in block, C, T, P, P)
    return x.reshape(t * gh * gw, C * T * P * P)
