"""Wrong on purpose (judge --verify): the text after an image continues at the image's largest position + 1, time included."""
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
        p, i = int(out[-1].max()) + 1, i + t * h * w                          # largest of all three + 1
    return torch.cat(out, dim=1) if out else torch.zeros(3, 0, dtype=torch.int64)
