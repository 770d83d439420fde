"""Reference solution for 242."""
import torch


def position_ids(ids, grid_thw, image_token_id, merge_size):
    out, p, i, images = [], 0, 0, iter(grid_thw.tolist())
    tokens = ids.tolist()
    while i < len(tokens):
        if tokens[i] != image_token_id:                                       # text: three equal streams
            out.append(torch.tensor([[p], [p], [p]]))
            p, i = p + 1, i + 1
            continue
        t, h, w = next(images)
        h, w = h // merge_size, w // merge_size                               # the merged grid
        a, r, c = torch.meshgrid(torch.arange(t), torch.arange(h), torch.arange(w), indexing="ij")
        out.append(torch.stack([a, r, c]).reshape(3, -1) + p)                 # (3, t * h * w), row-major
        p, i = p + max(h, w), i + t * h * w                                   # max(h, w) // merge, whatever t is
    return torch.cat(out, dim=1) if out else torch.zeros(3, 0, dtype=torch.int64)
