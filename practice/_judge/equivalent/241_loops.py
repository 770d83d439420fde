"""Equivalent form (judge --verify): the rows built one patch at a time, block by block."""
import torch


def patchify(frames, patch_size, temporal_patch_size, merge_size):
    F, C, H, W = frames.shape
    T, P, m = temporal_patch_size, patch_size, merge_size
    rows = []
    for g in range(F // T):
        group = frames[g * T:(g + 1) * T]                                # (T, C, H, W)
        for bi in range(H // P // m):
            for bj in range(W // P // m):
                for i in range(m):
                    for j in range(m):
                        r, c = (bi * m + i) * P, (bj * m + j) * P
                        cube = group[:, :, r:r + P, c:c + P]             # (T, C, P, P)
                        rows.append(cube.transpose(0, 1).flatten())      # (C, T, P, P) flattened
    return torch.stack(rows)
