"""Rotary position embedding (RoPE), as Qwen3.5's full-attention layers use it.

Why: a dot product q . k does not know where the two tokens stand. RoPE turns pair i of the
token at position m by the angle m * f_i; turning q by m * f and k by n * f leaves q . k
depending on (m - n) * f only, so every score sees how far apart two tokens are, not where.
Rotations keep lengths: the norms that q_norm and k_norm set stay as they are.

    f_i = theta^(-2i / rotary_dim),  i = 0 .. rotary_dim/2 - 1
    (x_i, x_{i+r/2})  ->  (x_i cos - x_{i+r/2} sin,  x_{i+r/2} cos + x_i sin)

Only the first rotary_dim = head_dim * partial_rotary_factor entries of a head turn (0.8B: 64 of
256). Pair i is entries i and i + rotary_dim/2 ("rotate-half", as the checkpoint was trained).
Multimodal RoPE gives every token three positions (time, height, width) and deals the pairs out
among them (`mrope_angles`); an image's tokens stand on a grid (`rope_index`), text has three
equal positions, which is plain RoPE. After an image the text goes on at p + max(h, w) / merge,
so later positions are index + a constant, the rope delta (qwen/cache.py Cache.delta).
Angles, cos, sin and the rotation in fp32 (a bf16 angle at position 5000 is off by up to 16 radians).
"""
import torch
import torch.nn as nn

from qwen.lang import QwenError


def rope_settings(cfg):
    """(rotary_dim, theta, mrope_section) from a Config's config.json: `rope_parameters`, or the
    top-level `rope_theta` / `partial_rotary_factor` with `rope_scaling` of older files."""
    raw = getattr(cfg, "raw", None) or {}
    text = raw.get("text_config", raw)
    params = text.get("rope_parameters") or text.get("rope_scaling") or {}
    theta = float(params.get("rope_theta", text.get("rope_theta", 10000.0)))
    factor = float(params.get("partial_rotary_factor", text.get("partial_rotary_factor", 1.0)))
    rotary_dim = int(cfg.head_dim * factor)
    section = params.get("mrope_section") or [rotary_dim // 2, 0, 0]
    return rotary_dim, theta, list(section)


def inverse_frequencies(rotary_dim, theta):
    """f_i = theta^(-2i / rotary_dim), i = 0 .. rotary_dim/2 - 1: (rotary_dim/2,), fp32 powers as the
    reference computes them, so the angles match the checkpoint's to the last bit."""
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim
    return 1.0 / (theta ** exponents)


class RotaryEmbedding(nn.Module):
    """positions (seq,), (batch, seq) or (3, batch, seq) -> (cos, sin), fp32, (..., seq, rotary_dim).
    inv_freq is a plain fp32 tensor, not a buffer: `model.to(torch.bfloat16)` cannot round it."""

    def __init__(self, cfg):
        super().__init__()
        self.rotary_dim, self.theta, self.mrope_section = rope_settings(cfg)
        self.inv_freq = inverse_frequencies(self.rotary_dim, self.theta)     # (rotary_dim/2,), fp32

    def forward(self, positions):
        inv_freq = self.inv_freq.to(positions.device)
        if positions.dim() == 3:                                             # (3, batch, seq)
            angles = mrope_angles(positions, inv_freq, self.mrope_section)   # (batch, seq, rotary_dim/2)
        else:
            angles = positions.to(torch.float32)[..., None] * inv_freq      # (..., seq, rotary_dim/2)
        angles = torch.cat((angles, angles), dim=-1)                         # (..., seq, rotary_dim)
        return angles.cos(), angles.sin()

    def extra_repr(self):
        return f"rotary_dim={self.rotary_dim}, theta={self.theta:g}"


def rotate_half(x):
    """[x1, x2] -> [-x2, x1] on the last dimension: turns pair (x1_i, x2_i) by 90 degrees."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, cos, sin):
    """Rotate the first rotary_dim entries of each head of x (batch, heads, seq, head_dim); pass the
    rest through. cos, sin: (seq, rotary_dim) or (batch, seq, rotary_dim)."""
    r = cos.shape[-1]
    if cos.dim() == 3:                                   # (batch, seq, r) -> (batch, 1, seq, r)
        cos, sin = cos[:, None], sin[:, None]
    rot, rest = x[..., :r].float(), x[..., r:]           # (B, H, T, r), (B, H, T, head_dim - r)
    rot = rot * cos + rotate_half(rot) * sin             # fp32, broadcast over batch and heads
    return torch.cat((rot.to(x.dtype), rest), dim=-1)    # one cast; (B, H, T, head_dim)


def mrope_angles(positions_thw, inv_freq, mrope_section):
    """Angles (..., seq, rotary_dim/2) from positions (3, ..., seq): pairs dealt out T H W T H W ...
    while each stream's share in mrope_section lasts (0.8B: [11, 11, 10] of 32), the rest read T."""
    angles = positions_thw.to(torch.float32)[..., None] * inv_freq      # (3, ..., seq, r/2)
    out = angles[0].clone()                                              # time stream by default
    for stream in (1, 2):                                                # height, width
        take = slice(stream, 3 * mrope_section[stream], 3)
        out[..., take] = angles[stream][..., take]
    return out


def rope_index(ids, grid_thw, cfg, start=0):
    """The (time, height, width) position of every token: (3, batch, seq) int64.

    ids (batch, seq) or (seq,), each image's pad repeated t * h * w / merge^2 times; grid_thw (images,
    3), in the order they appear; start: the first position (after a cache: length + delta). An image
    at p: time p + (0 .. t-1), row p + (0 .. h/merge - 1), column p + (0 .. w/merge - 1), row-major.
    """
    ids = torch.as_tensor(ids)
    ids = ids[None] if ids.dim() == 1 else ids                               # (batch, seq)
    batch, seq = ids.shape
    grids = [] if grid_thw is None else image_grids(grid_thw)
    image_id, merge = cfg.image_tokens() if grids or (ids == _image_id(cfg)).any() else (None, 1)
    if grids:
        image_grids(grids, merge)                                            # h and w in whole merged blocks
    sizes = [t * (h // merge) * (w // merge) for t, h, w in grids]           # each image's merged tokens
    out = torch.empty(3, batch, seq, dtype=torch.int64)
    used = 0                                                                 # images placed so far
    for b in range(batch):
        slots = (ids[b] == image_id).nonzero().squeeze(1).tolist() if image_id is not None else []
        pos, i, k = start, 0, 0                                              # next position, token, slot
        while i < seq:
            j = slots[k] if k < len(slots) else seq                          # the next image (or the end)
            out[:, b, i:j] = torch.arange(pos, pos + j - i)                  # text: equal streams
            pos, i = pos + j - i, j
            if i == seq:
                break
            if used == len(grids) or slots[k:k + (n := sizes[used])] != list(range(i, i + n)):
                raise _count_error(int((ids[:b + 1] == image_id).sum()), sizes)
            t, h, w = grids[used]
            out[:, b, i:i + n] = _grid_positions(pos, t, h // merge, w // merge)
            pos, i, k, used = pos + max(h, w) // merge, i + n, k + n, used + 1
    if used != len(grids):
        raise _count_error(int((ids == image_id).sum()), sizes)
    return out


def image_grids(grid_thw, merge=None):
    """grid_thw, a tensor (images, 3) or a list of (t, h, w), as [(t, h, w), ...] ints, checked: whole
    numbers, each at least 1, h and w multiples of `merge` (when given)."""
    g = torch.as_tensor(grid_thw)
    if g.dtype.is_floating_point or g.dtype.is_complex or g.dtype == torch.bool or g.shape[-1:] != (3,) or g.dim() > 2:
        raise QwenError("grid_thw has shape {shape} and dtype {dtype}; it should be (images, 3) whole numbers "
                        "(t, h, w per image). Use the grid that preprocess returned.",
                        "grid_thw 的形状是 {shape}，类型是 {dtype}；它应当是 (images, 3) 的整数（每张图像的 t、h、w）。"
                        "请使用 preprocess 返回的网格。", shape=tuple(g.shape), dtype=str(g.dtype).replace("torch.", ""))
    grids = [tuple(int(n) for n in row) for row in g.reshape(-1, 3).tolist()]
    bad = [row for row in grids if min(row) < 1 or merge and (row[1] % merge or row[2] % merge)]
    if bad:
        raise QwenError("grid_thw {grid}: t, h and w must be at least 1, h and w multiples of {m} "
                        "(the merged blocks). Use the grid that preprocess returned.",
                        "grid_thw {grid}：t、h、w 至少为 1，h 和 w 必须是 {m} 的倍数（合并的块）。"
                        "请使用 preprocess 返回的网格。", grid=bad[0], m=merge or "merge_size")
    return grids


def _grid_positions(pos, t, h, w):
    """(3, t * h * w): time, row and column of each merged token of one image, from pos, row-major."""
    tt, hh, ww = torch.meshgrid(torch.arange(t), torch.arange(h), torch.arange(w), indexing="ij")
    return torch.stack([tt, hh, ww]).reshape(3, -1) + pos


def _image_id(cfg):
    """The image pad token's id, or -1 for a checkpoint without one (text only: no token is an image)."""
    value = cfg.raw.get("image_token_id") if isinstance(cfg.raw.get("vision_config"), dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def _count_error(slots, sizes):
    """The image pad tokens and the images do not match: one line with both counts."""
    return QwenError("The prompt holds {slots} image pad tokens but the {n} image(s) need {need} ({each}), each "
                     "image's in one run: render the prompt with the chat template and expand each "
                     "<|image_pad|> to its image's token count (qwen/generate.py image_prompt_ids).",
                     "提示词里有 {slots} 个图像占位词元，但这 {n} 张图像需要 {need} 个（{each}），每张图像的占位词元"
                     "要连在一起：请用对话模板生成提示词，并把每个 <|image_pad|> 展开成该图像的词元数"
                     "（qwen/generate.py image_prompt_ids）。", slots=slots, n=len(sizes), need=sum(sizes),
                     each=" + ".join(map(str, sizes)) or "0")
