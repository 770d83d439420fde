"""Wrong on purpose (judge --verify): the text after an image continues at p + its number of tokens (196 for 448 x 448) instead of p + max(h, w) // merge (14)."""
import torch


def position_ids(ids, grid_thw, image_token_id, merge_size):
    streams, p, i, g = [[], [], []], 0, 0, 0
    tokens = ids.tolist()
    while i < len(tokens):
        if tokens[i] != image_token_id:
            for s in streams:
                s.append(p)
            p, i = p + 1, i + 1
            continue
        t, h, w = (int(x) for x in grid_thw[g])
        g += 1
        h, w = h // merge_size, w // merge_size
        for a in range(t):
            for r in range(h):
                for c in range(w):
                    streams[0].append(p + a)
                    streams[1].append(p + r)
                    streams[2].append(p + c)
        p, i = p + t * h * w, i + t * h * w                                   # + the image's tokens
    return torch.tensor(streams, dtype=torch.int64).reshape(3, -1)
