"""Wrong on purpose (judge --verify): each row is (T, C, P, P), the order of the frames tensor, not (C, T, P, P)."""
import torch


def patchify(frames, patch_size, temporal_patch_size, merge_size):
    F, C, H, W = frames.shape
    T, P, m = temporal_patch_size, patch_size, merge_size
    t, gh, gw = F // T, H // P, W // P
    x = frames.reshape(t, T, C, gh // m, m, P, gw // m, m, P)
    x = x.permute(0, 3, 6, 4, 7, 1, 2, 5, 8)
    return x.reshape(t * gh * gw, T * C * P * P)
