"""Wrong on purpose (judge --verify): the frames split as (T, t) instead of (t, T)."""
import torch


def patchify(frames, patch_size, temporal_patch_size, merge_size):
    F, C, H, W = frames.shape
    T, P, m = temporal_patch_size, patch_size, merge_size
    t, gh, gw = F // T, H // P, W // P
    x = frames.reshape(T, t, C, gh // m, m, P, gw // m, m, P)
    x = x.permute(1, 3, 6, 4, 7, 2, 0, 5, 8)         # frames grouped (T, t)
    return x.reshape(t * gh * gw, C * T * P * P)
