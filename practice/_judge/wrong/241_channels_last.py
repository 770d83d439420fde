"""Wrong on purpose (judge --verify): the channel is the last value of each pixel, as in an (H, W, C) image."""
import torch


def patchify(frames, patch_size, temporal_patch_size, merge_size):
    F, C, H, W = frames.shape
    T, P, m = temporal_patch_size, patch_size, merge_size
    t, gh, gw = F // T, H // P, W // P
    x = frames.permute(0, 2, 3, 1)                        # (F, H, W, C)
    x = x.reshape(t, T, gh // m, m, P, gw // m, m, P, C)
    x = x.permute(0, 2, 5, 3, 6, 1, 4, 7, 8)              # (t, blocks, in block, T, P, P, C)
    return x.reshape(t * gh * gw, T * P * P * C)
