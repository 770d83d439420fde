"""Wrong on purpose (judge --verify): inside a block the patches go column by column."""
import torch


def patchify(frames, patch_size, temporal_patch_size, merge_size):
    F, C, H, W = frames.shape
    T, P, m = temporal_patch_size, patch_size, merge_size
    t, gh, gw = F // T, H // P, W // P
    x = frames.reshape(t, T, C, gh // m, m, P, gw // m, m, P)
    x = x.permute(0, 3, 6, 7, 4, 2, 1, 5, 8)
    return x.reshape(t * gh * gw, C * T * P * P)
