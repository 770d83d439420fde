"""Rotary position embedding (RoPE), as Qwen3.5's full-attention layers use it.

Why: attention compares a query with every key by a dot product, and a dot product does not
know where the two tokens stand. RoPE tells it by rotating: split a vector into pairs of
entries, treat each pair as a point in a plane, and turn pair i of the token at position m by
the angle m * f_i. Turning a query by m * f and a key by n * f leaves their dot product
depending on (m - n) * f only, so every score sees how far apart two tokens are, not where
they are. Rotations keep lengths, so the norms that q_norm and k_norm set stay as they are.

Frequencies: f_i = theta^(-2i / rotary_dim) for i = 0 .. rotary_dim/2 - 1. The first pair turns
by one radian per token; the last one so slowly (0.8B: theta = 1e7, rotary_dim 64, a full
turn every 2 pi * 1e7^(62/64), about 38 million tokens) that it still tells positions apart
across the whole 262,144-token context.

Partial rotation: Qwen3.5 rotates only the first rotary_dim = head_dim * partial_rotary_factor
entries of each head (0.8B: 256 * 0.25 = 64) and passes the other 192 through unchanged; those
carry content with no position in them.

Layout ("rotate-half"): pair i is made of entries i and i + rotary_dim/2, not of neighbours
2i and 2i+1 (the RoPE paper's "interleaved" layout). Both are rotations; the checkpoint was
trained with rotate-half, so that is the one that reproduces it. cos and sin therefore hold
each angle twice: [angles, angles].

Multimodal RoPE (3D): the config also names `mrope_section` and `mrope_interleaved`. Every
token has three positions, (time, height, width), and the frequency pairs are dealt out among
the three streams, interleaved (`mrope_angles`). An image's tokens stand on a grid: the same
time, their own row and column (`rope_index`). Text tokens get three equal positions, so
whichever stream a pair reads, its angle is position * f_i: plain 1-D RoPE is the special case
of equal streams, and a text-only prompt takes that shorter road (RotaryEmbedding on 1-D
positions), with the same numbers.

After an image, the text goes on at p + max(h, w) / merge (its largest row or column + 1; its
time positions are not counted, as in transformers' get_rope_index), not at its token count:
a 448 x 448 image is 14 x 14 = 196 tokens but spans only 14 positions. So from there on a
token's position is its index plus a constant, the "rope delta" (here 14 - 196 = -182), which
decoding adds to every later position (qwen/generate.py Cache.delta).

Precision: angles, cos and sin in fp32 (a bf16 angle at position 5000 would be off by up to
16 radians); the rotation is computed in fp32 and cast back to the input's dtype once.
"""
import torch
import torch.nn as nn

from qwen.lang import QwenError


def rope_settings(cfg):
    """(rotary_dim, theta, mrope_section) from a Config's config.json (either layout).

    Reads `rope_parameters` (transformers 5 and the Hub's file) or the older top-level keys
    `rope_theta` / `partial_rotary_factor` (with `rope_scaling` holding mrope_section).
    """
    raw = getattr(cfg, "raw", None) or {}
    text = raw.get("text_config", raw)
    params = text.get("rope_parameters") or text.get("rope_scaling") or {}
    theta = float(params.get("rope_theta", text.get("rope_theta", 10000.0)))
    factor = float(params.get("partial_rotary_factor", text.get("partial_rotary_factor", 1.0)))
    rotary_dim = int(cfg.head_dim * factor)
    section = params.get("mrope_section") or [rotary_dim // 2, 0, 0]
    return rotary_dim, theta, list(section)


def inverse_frequencies(rotary_dim, theta):
    """f_i = theta^(-2i / rotary_dim), i = 0 .. rotary_dim/2 - 1, in fp32: (rotary_dim/2,).

    Computed the way the reference implementation computes them (fp32 powers), so that the
    angles agree with the ones the checkpoint was trained with to the last bit.
    """
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim
    return 1.0 / (theta ** exponents)


class RotaryEmbedding(nn.Module):
    """positions -> (cos, sin), fp32, last dimension rotary_dim (each angle twice: rotate-half).

    positions (seq,) gives (seq, rotary_dim); (batch, seq) and (3, batch, seq) give (batch, seq, rotary_dim).
    It holds no weights: inv_freq is computed from the config, not stored in the checkpoint. It is a
    plain fp32 tensor, not a buffer, so that `model.to(torch.bfloat16)` cannot round the frequencies.
    """

    def __init__(self, cfg):
        super().__init__()
        self.rotary_dim, self.theta, self.mrope_section = rope_settings(cfg)
        self.inv_freq = inverse_frequencies(self.rotary_dim, self.theta)     # (rotary_dim/2,), fp32

    def forward(self, positions):
        """positions (seq,) or (batch, seq): one position per token (text); (3, batch, seq): the
        time, height and width positions of rope_index, through the interleaved sections."""
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
    """Rotate the first rotary_dim entries of each head of x; pass the rest through.

    x: (batch, heads, seq, head_dim); cos, sin: (seq, rotary_dim) or (batch, seq, rotary_dim).
    Pair i = (x_i, x_{i+r/2}) becomes (x_i cos - x_{i+r/2} sin, x_{i+r/2} cos + x_i sin).
    """
    r = cos.shape[-1]
    if cos.dim() == 3:                                   # (batch, seq, r) -> (batch, 1, seq, r)
        cos, sin = cos[:, None], sin[:, None]
    rot, rest = x[..., :r].float(), x[..., r:]           # (B, H, T, r), (B, H, T, head_dim - r)
    rot = rot * cos + rotate_half(rot) * sin             # fp32, broadcast over batch and heads
    return torch.cat((rot.to(x.dtype), rest), dim=-1)    # one cast; (B, H, T, head_dim)


def mrope_angles(positions_thw, inv_freq, mrope_section):
    """Interleaved multimodal RoPE: which position stream each frequency pair reads.

    positions_thw: (3, ..., seq), the time, height and width positions of each token.
    Pairs are dealt out round-robin, T H W T H W ..., for as long as each stream's share in
    mrope_section lasts (0.8B: [11, 11, 10] of the 32 pairs); the remaining pairs read T.
    Returns the angles (..., seq, rotary_dim/2). When the three streams are equal (text),
    this is positions * inv_freq exactly, the plain 1-D RoPE of RotaryEmbedding.
    """
    angles = positions_thw.to(torch.float32)[..., None] * inv_freq      # (3, ..., seq, r/2)
    out = angles[0].clone()                                              # time stream by default
    for stream in (1, 2):                                                # height, width
        take = slice(stream, 3 * mrope_section[stream], 3)
        out[..., take] = angles[stream][..., take]
    return out


def rope_index(ids, grid_thw, cfg, start=0):
    """The (time, height, width) position of every token: (3, batch, seq) int64.

    ids (batch, seq) or (seq,), with each image's pad tokens already expanded (one per merged
    token: t * h * w / merge^2 of them); grid_thw (images, 3), the patch grid of each image, in
    the order the images appear (row by row of the batch). `start`: the position of the first
    token (a prompt read after a cache: cache.length + cache.delta).

    Text: three equal positions, one more per token. An image at position p: time p + (0 .. t-1),
    row p + (0 .. h/merge - 1), column p + (0 .. w/merge - 1), its tokens in row-major order; the
    text after it continues at p + max(h, w) / merge (whatever t is). The image token
    id and the merge size come from the config (cfg.image_tokens()).
    """
    ids = torch.as_tensor(ids)
    if ids.dim() == 1:
        ids = ids[None]                                                      # (1, seq)
    batch, seq = ids.shape
    grids = [] if grid_thw is None else image_grids(grid_thw)
    image_id, merge = cfg.image_tokens() if grids or (ids == _image_id(cfg)).any() else (None, 1)
    if grids:
        image_grids(grids, merge)                                            # h and w in whole merged blocks
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
            if used == len(grids):
                raise _count_error(len(slots) + _slots_before(ids, b, image_id), grids, merge, cfg)
            t, h, w = grids[used]
            n = t * (h // merge) * (w // merge)
            if i + n > seq or slots[k:k + n] != list(range(i, i + n)):
                raise _count_error(len(slots) + _slots_before(ids, b, image_id), grids, merge, cfg)
            out[:, b, i:i + n] = _grid_positions(pos, t, h // merge, w // merge)
            pos, i, k, used = pos + max(h, w) // merge, i + n, k + n, used + 1
    if used != len(grids):
        raise _count_error(int((ids == image_id).sum()), grids, merge, cfg)
    return out


def image_grids(grid_thw, merge=None):
    """grid_thw, a tensor (images, 3) or a list of (t, h, w), as [(t, h, w), ...] Python ints, checked:
    whole numbers, t, h, w at least 1, h and w multiples of `merge` (when given). A float, negative or badly
    shaped grid would otherwise fail deep inside torch (a slice, an arange) with no word of why."""
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


def _slots_before(ids, b, image_id):
    return int((ids[:b] == image_id).sum())


def _count_error(slots, grids, merge, cfg):
    """The image pad tokens and the images do not match: one line with both counts."""
    need = sum(t * (h // merge) * (w // merge) for t, h, w in grids)
    return QwenError("The prompt holds {slots} image pad tokens but the {n} image(s) need {need} ({each}), each "
                     "image's in one run: render the prompt with the chat template and expand each "
                     "<|image_pad|> to its image's token count (qwen/generate.py image_prompt_ids).",
                     "提示词里有 {slots} 个图像占位词元，但这 {n} 张图像需要 {need} 个（{each}），每张图像的占位词元"
                     "要连在一起：请用对话模板生成提示词，并把每个 <|image_pad|> 展开成该图像的词元数"
                     "（qwen/generate.py image_prompt_ids）。",
                     slots=slots, n=len(grids), need=need,
                     each=" + ".join(str(t * (h // merge) * (w // merge)) for t, h, w in grids) or "0")
