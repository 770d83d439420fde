"""Wrong on purpose (judge --verify): images found as runs of image tokens, so two images side by side
are read as one."""
import torch


def position_ids(ids, grid_thw, image_token_id, merge_size):
    is_image = (ids == image_token_id).tolist()
    out, p, i, k = [], 0, 0, 0
    while i < len(is_image):
        j = i
        while j < len(is_image) and is_image[j] == is_image[i]:              # one run of text or of image tokens
            j += 1
        if not is_image[i]:
            out.append(torch.arange(p, p + j - i).expand(3, -1))
            p += j - i
        else:
            t, h, w = grid_thw[k].tolist()
            k += 1
            h, w = h // merge_size, w // merge_size
            a, r, c = torch.meshgrid(torch.arange(t), torch.arange(h), torch.arange(w), indexing="ij")
            out.append(torch.stack([a, r, c]).reshape(3, -1) + p)
            p += max(h, w)
        i = j
    return torch.cat(out, dim=1)
