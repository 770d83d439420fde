"""Wrong on purpose (judge --verify): the image's tokens numbered like text, one position each, equal streams."""
import torch


def position_ids(ids, grid_thw, image_token_id, merge_size):
    n = len(ids)
    return torch.arange(n).expand(3, n).clone()
