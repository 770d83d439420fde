"""The vision tower: an image's patches in, tokens the language model can read out (chapter 10).

Why: the language model reads vectors of width 1024, one per token, so an image has to become such
vectors. Qwen3.5's tower is a small Vision Transformer (Dosovitskiy et al., 2020): cut the image into
patches, turn each into a vector, let the patches attend to each other so each learns about the rest
of the picture, then merge every 2 x 2 neighbours into one token, 4 times fewer tokens. For 0.8B:

    pixel_values (patches, 1536)        qwen.image.preprocess: 3 colours x 2 frames x 16 x 16 pixels,
                                        the patches of each 2 x 2 block consecutive ("merge-block order")
    x = patch_embed(pixel_values)       (patches, 768)   a Conv3d with stride = kernel: one matmul
    x = x + position table              (patches, 768)   learned 48 x 48, bilinearly resized to the grid
    cos, sin = 2D rotary angles         (patches, 64)    row and column of each patch, for q and k
    12 blocks:                                           LayerNorms with bias, qkv with bias,
        x = x + attn(norm1(x))                           bidirectional attention, each image alone
        x = x + mlp(norm2(x))                            768 -> 3072 -> 768, gelu (tanh form)
    merger: norm(x) -> (patches/4, 3072)                 the 4 patches of a block side by side
            -> fc1 -> GELU -> fc2       (tokens, 1024)   one token per 2 x 2 block

Several images are one sequence of patches (`grid_thw` says where each ends); attention never crosses
from one image to another. Positions are told twice: the learned table (pretrained on 48 x 48 patches,
stretched to any grid with the corners aligned) is added once, at the start; the 2D rotary positions
act inside every attention (a quarter of each head's pairs turn with the row, a quarter with the
column, the other half repeats them), so a score depends on how far apart two patches are.

Precision, as transformers': matmuls and LayerNorms in the compute dtype; the position interpolation
weights, the rotary angles and the rotation of q and k in fp32.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from qwen.config import VisionConfig  # noqa: F401  (the README's qwen.vision.VisionConfig)
from qwen.image import preprocess  # noqa: F401  (the README's qwen.vision.preprocess)
from qwen.lang import QwenError
from qwen.rope import apply_rope, image_grids, inverse_frequencies, rope_index  # noqa: F401  (qwen.vision.rope_index)
from qwen.linear import Linear

LAYER_NORM_EPS = 1e-6                    # every LayerNorm of the tower (the config does not say it)


# ---------------------------------------------------------------------------- patches to vectors
class PatchEmbed(nn.Module):
    """(patches, C*T*p*p) -> (patches, hidden): the checkpoint stores a Conv3d, used as one matmul.

    A convolution whose stride equals its kernel never overlaps two windows: each output is one
    patch's C*T*p*p numbers times the kernel, flattened the same way, plus the bias, a matrix product
    with the kernel flattened to (hidden, C*T*p*p). The patches arrive cut and flattened in (C, T, p, p)
    order, so no window is slid. `conv3d` computes it the convolution's way, to show that both agree
    (to 1e-6 in fp32; in bf16 torch's two kernels round differently)."""

    def __init__(self, vcfg):
        super().__init__()
        kernel = (vcfg.temporal_patch_size, vcfg.patch_size, vcfg.patch_size)
        self.proj = nn.Conv3d(vcfg.in_channels, vcfg.hidden_size, kernel, stride=kernel, bias=True)

    def forward(self, pixel_values):
        w = self.proj.weight                                             # (hidden, C, T, p, p)
        return F.linear(pixel_values.to(w.dtype), w.flatten(1), self.proj.bias)   # (patches, hidden)

    def conv3d(self, pixel_values):
        """The same result as a convolution: each patch as a (C, T, p, p) volume, one window each."""
        w = self.proj.weight
        volumes = pixel_values.to(w.dtype).view(-1, *w.shape[1:])        # (patches, C, T, p, p)
        return self.proj(volumes).flatten(1)   # (patches, hidden, 1, 1, 1) -> (patches, hidden)


# ---------------------------------------------------------------------------- where each patch is
def _grids(grid_thw):
    """[(t, h, w), ...] as Python ints, from a (images, 3) tensor or a list."""
    return [tuple(int(n) for n in g) for g in torch.as_tensor(grid_thw).reshape(-1, 3).tolist()]


def patch_rows_cols(h, w, merge):
    """(row, column) of each patch of an h x w grid, (h*w,) each, in merge-block order: block by block,
    inside a block row by row. For merge 2: (0,0) (0,1) (1,0) (1,1), then (0,2) (0,3) (1,2) (1,3), ..."""
    rows = torch.arange(h)[:, None].expand(h, w)                         # (h, w)
    cols = torch.arange(w)[None, :].expand(h, w)
    blocks = (h // merge, merge, w // merge, merge)                      # (block row, in row, block col, in col)
    return (rows.reshape(blocks).transpose(1, 2).flatten(),
            cols.reshape(blocks).transpose(1, 2).flatten())


def _taps(index, size, side):
    """Bilinear interpolation along one axis, corners aligned: patch `index` of `size` reads the
    table's entries floor(s) and floor(s) + 1 at s = index * (side - 1) / (size - 1), weighted
    by closeness. Returns the two entries (n, 2) and their weights (n, 2), fp32."""
    s = index.float() * (side - 1) / max(size - 1, 1)                    # where in the table, 0 .. side-1
    taps = s.floor().long()[:, None] + torch.arange(2)                   # (n, 2)
    weights = (1 - (s[:, None] - taps.float()).abs()).clamp(min=0)      # 1 - distance
    return taps.clamp(max=side - 1), weights


def interpolate_positions(table, grid_thw, merge):
    """The learned position table (side*side, hidden), bilinearly resized to each image's grid (as F.interpolate
    with align_corners=True), in merge-block order, once per frame: (patches, hidden) fp32."""
    side = int(table.shape[0] ** 0.5)
    out = []
    for t, h, w in _grids(grid_thw):
        rows, cols = patch_rows_cols(h, w, merge)
        (r, wr), (c, wc) = _taps(rows, h, side), _taps(cols, w, side)   # (h*w, 2) each
        index = (r[:, :, None] * side + c[:, None, :]).flatten(1).to(table.device)   # (h*w, 4): the 4 around it
        weight = (wr[:, :, None] * wc[:, None, :]).flatten(1).to(table.device)       # (h*w, 4), sum 1
        mixed = (F.embedding(index, table) * weight[:, :, None]).sum(1)  # (h*w, 4, hidden) -> (h*w, hidden)
        out.append(mixed.repeat(t, 1))                                   # (t*h*w, hidden)
    return torch.cat(out)


class VisionRotary(nn.Module):
    """grid_thw -> (cos, sin) of the 2D rotary positions, (patches, head_dim) each, fp32, from the config.
    head_dim / 4 frequencies (0.8B: 16), each used twice: [row * f, column * f] fill half a head, and
    rotate-half pairs entry i with i + head_dim/2, so cos and sin repeat that half."""

    def __init__(self, vcfg):
        super().__init__()
        self.merge = vcfg.spatial_merge_size
        self.inv_freq = inverse_frequencies(vcfg.head_dim // 2, vcfg.rope_theta)   # (head_dim/4,)

    def forward(self, grid_thw, device="cpu"):
        angles = []
        for t, h, w in _grids(grid_thw):
            rows, cols = patch_rows_cols(h, w, self.merge)
            a = torch.cat((rows[:, None] * self.inv_freq, cols[:, None] * self.inv_freq), -1)   # (h*w, head_dim/2)
            angles.append(a.repeat(t, 1))
        angles = torch.cat(angles).repeat(1, 2).to(device)               # (patches, head_dim)
        return angles.cos(), angles.sin()


# ---------------------------------------------------------------------------- the blocks
class VisionAttention(nn.Module):
    """(patches, hidden) -> (patches, hidden): every patch attends to every patch of its own image
    (no causal mask: an image has no "before"), with 2D rotary q and k."""

    def __init__(self, vcfg):
        super().__init__()
        self.heads, self.head_dim = vcfg.num_heads, vcfg.head_dim
        self.qkv = Linear(vcfg.hidden_size, 3 * vcfg.hidden_size, bias=True)
        self.proj = Linear(vcfg.hidden_size, vcfg.hidden_size, bias=True)

    def forward(self, x, cos, sin, lengths, attentions=None):
        n = x.shape[0]
        q, k, v = self.qkv(x).view(n, 3, self.heads, self.head_dim).permute(1, 2, 0, 3)   # (heads, patches, head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)         # in fp32, rounded back to x's dtype
        out = []
        for qs, ks, vs in zip(*(t.split(lengths, dim=1) for t in (q, k, v))):   # one image (frame) at a time
            out.append(F.scaled_dot_product_attention(qs[None], ks[None], vs[None])[0])   # (heads, length, head_dim)
            if attentions is not None:                                   # for the pictures of chapter 10
                scores = qs.float() @ ks.float().transpose(1, 2) / self.head_dim ** 0.5
                attentions.append(scores.softmax(-1))                   # (heads, length, length)
        out = torch.cat(out, dim=1).transpose(0, 1).reshape(n, -1)      # (patches, heads * head_dim)
        return self.proj(out)


class VisionMLP(nn.Module):
    """hidden -> intermediate -> hidden, gelu in its tanh form, biases (unlike the text model's SwiGLU)."""

    def __init__(self, vcfg):
        super().__init__()
        self.linear_fc1 = Linear(vcfg.hidden_size, vcfg.intermediate_size, bias=True)
        self.linear_fc2 = Linear(vcfg.intermediate_size, vcfg.hidden_size, bias=True)

    def forward(self, x):
        return self.linear_fc2(F.gelu(self.linear_fc1(x), approximate="tanh"))


class VisionBlock(nn.Module):
    """x + attn(norm1(x)), then x + mlp(norm2(x)): Pre-Norm, as the text model, with LayerNorms."""

    def __init__(self, vcfg):
        super().__init__()
        self.norm1 = nn.LayerNorm(vcfg.hidden_size, eps=LAYER_NORM_EPS)
        self.norm2 = nn.LayerNorm(vcfg.hidden_size, eps=LAYER_NORM_EPS)
        self.attn = VisionAttention(vcfg)
        self.mlp = VisionMLP(vcfg)

    def forward(self, x, cos, sin, lengths, attentions=None):
        x = x + self.attn(self.norm1(x), cos, sin, lengths, attentions)  # (patches, hidden)
        return x + self.mlp(self.norm2(x))


class PatchMerger(nn.Module):
    """(patches, hidden) -> (patches / m^2, out_hidden): each m x m block of consecutive patches normalized,
    laid side by side (4 x 768 = 3072), mapped to the language model's width by an MLP (exact GELU)."""

    def __init__(self, vcfg, out_hidden):
        super().__init__()
        merged = vcfg.hidden_size * vcfg.spatial_merge_size ** 2
        self.norm = nn.LayerNorm(vcfg.hidden_size, eps=LAYER_NORM_EPS)
        self.linear_fc1 = Linear(merged, merged, bias=True)
        self.linear_fc2 = Linear(merged, out_hidden, bias=True)

    def forward(self, x):
        x = self.norm(x).view(-1, self.linear_fc1.in_features)           # (tokens, m*m*hidden)
        return self.linear_fc2(F.gelu(self.linear_fc1(x)))               # (tokens, out_hidden)


# ---------------------------------------------------------------------------- the tower
class VisionModel(nn.Module):
    """pixel_values (patches, C*T*p*p), grid_thw (images, 3) -> image tokens (tokens, out_hidden):
    the features of all images, concatenated in order (t*h*w / m^2 tokens per image)."""

    def __init__(self, vcfg, out_hidden=None):
        super().__init__()
        self.cfg = vcfg
        self.patch_embed = PatchEmbed(vcfg)
        table = torch.empty(vcfg.num_position_embeddings, vcfg.hidden_size)   # filled by the loader:
        self.pos_embed = nn.Embedding(*table.shape, _weight=table)           # no random init to spend time on
        with torch.device("cpu"):                           # no weights: real even when built on "meta"
            self.rotary = VisionRotary(vcfg)
        self.blocks = nn.ModuleList(VisionBlock(vcfg) for _ in range(vcfg.depth))
        self.merger = PatchMerger(vcfg, vcfg.out_hidden_size if out_hidden is None else out_hidden)

    @property
    def dtype(self):
        return self.patch_embed.proj.weight.dtype

    def embed(self, pixel_values, grid_thw):
        """Patches -> vectors with their learned positions added: (patches, hidden)."""
        x = self.patch_embed(pixel_values)                               # (patches, hidden)
        pos = interpolate_positions(self.pos_embed.weight, grid_thw, self.cfg.spatial_merge_size)
        return x + pos.to(x.dtype)

    def forward(self, pixel_values, grid_thw, attentions=None):
        """attentions, a list, receives one (heads, n, n) fp32 tensor per image (frame) and block."""
        grids = image_grids(grid_thw, self.cfg.spatial_merge_size)      # whole numbers, in merged blocks
        pixel_values = torch.as_tensor(pixel_values)                     # a numpy array is welcome too
        self._check(pixel_values, grids)
        x = self.embed(pixel_values, grids)                              # (patches, hidden)
        cos, sin = self.rotary(grids, x.device)                          # (patches, head_dim) each
        lengths = [h * w for t, h, w in grids for _ in range(t)]         # attention stays inside each
        for block in self.blocks:
            x = block(x, cos, sin, lengths, attentions)
        return self.merger(x)                                            # (tokens, out_hidden)

    def _check(self, pixel_values, grids):
        shape, want = tuple(pixel_values.shape), (sum(t * h * w for t, h, w in grids), self.cfg.patch_values)
        if shape != want:
            raise QwenError("pixel_values has shape {shape}, but grid_thw {grids} needs {want}: pass the pixel values "
                            "and the grid that preprocess returned together.", "pixel_values 的形状是 {shape}，但 grid_thw "
                            "{grids} 需要 {want}：请把 preprocess 返回的像素值和网格一起传入。", shape=shape, grids=grids, want=want)
