"""The whole model, assembled from the parts of the chapters.

Qwen3.5 is a stack of decoder layers over a residual stream:

    x = embed_tokens[ids]                                   (batch, seq, hidden)
    for each layer:                                         Pre-Norm: normalize what a sublayer reads,
        x = x + mixer(input_layernorm(x))                   never the stream itself
        x = x + mlp(post_attention_layernorm(x))
    logits = norm(x) @ E.T                                  (batch, seq, vocab)

The mixer is full attention (chapter 6) in every fourth layer and Gated DeltaNet (chapter 7) in the
others, as `cfg.layer_types` says. The output layer is the embedding table itself when
`tie_word_embeddings` (0.8B), else its own `lm_head.weight`.

Dtypes: the weights are converted once, at load time, to the compute dtype the matmuls run in (fp32, or
bf16: half the memory); norm statistics, softmax, the decay and the delta rule stay fp32, as do logits.

Loading: `load_model(path)` builds the model on the "meta" device (shapes only, no memory), then fills
it strictly, key by key: each tensor read once, a slice at a time, converted straight into its final
buffer (one already in the compute dtype is mapped from the file: no copy). The vision tower (chapter
10) goes to `model.visual`, None for a text-only export; the MTP head (chapter 12) is left to
qwen.mtp.load_head; tensors the model has no place for are listed in `model.unused`.
"""
from pathlib import Path

import torch
import torch.nn as nn

from qwen.attention import Attention
from qwen.deltanet import GatedDeltaNet
from qwen.embedding import Embedding
from qwen.cache import Cache
from qwen.lang import QwenError
from qwen.linear import Linear, product
from qwen.mlp import MLP
from qwen.norm import GatedRMSNorm, RMSNorm
from qwen.rope import RotaryEmbedding, image_grids, rope_index
from qwen.vision import VisionConfig, VisionModel
from qwen.weights import DTYPES, check_finite_block, load, load_weights
from qwen.config import Config


class DecoderLayer(nn.Module):
    """One layer: x + mixer(norm(x)), then x + mlp(norm(x)). The mixer is attention or Gated DeltaNet."""

    def __init__(self, cfg, index, kind=None):
        super().__init__()
        self.kind = kind or cfg.layer_types[index]          # "full_attention" or "linear_attention"
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if self.kind == "full_attention":
            self.self_attn = Attention(cfg)
        else:
            self.linear_attn = GatedDeltaNet(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)

    def mix(self, h, cos, sin, cache=None):
        """The token mixer on an already normalized input: the only place tokens see each other."""
        if self.kind == "full_attention":
            return self.self_attn(h, cos, sin, cache=cache)
        return self.linear_attn(h, cache=cache)

    def forward(self, x, cos, sin, cache=None):
        x = x + self.mix(self.input_layernorm(x), cos, sin, cache)             # (batch, seq, hidden)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen35(nn.Module):
    """The language model: ids (batch, seq) -> logits (batch, seq, vocab) in fp32."""

    def __init__(self, cfg, dtype=torch.float32):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size, dtype=dtype)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if not cfg.tie_word_embeddings:
            self.lm_head = Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        with torch.device("cpu"):                           # no weights: computed from the config, for
            self.rotary = RotaryEmbedding(cfg)              # real even when the rest is built on "meta"
        self.visual = None                                  # the vision tower, set by load_model (chapter 10)
        self.path = None                                    # the checkpoint folder, set by load_model
        self.unused = []                                    # checkpoint tensors it has no place for
        self.mtp = None                                     # the MTP head, set by qwen.mtp.load_head
        self.output_layer = None                            # a quantized output layer (qwen/quant.py, chapter 13)
        self.mtp_problem = None                             # why a checkpoint's mtp.* could not make it: a QwenError

    @property
    def output_weight(self):
        """(vocab, hidden): the embedding table when tied, else lm_head.weight."""
        return self.embed_tokens.weight if self.cfg.tie_word_embeddings else self.lm_head.weight

    def new_cache(self):
        return Cache(len(self.layers))

    def logits(self, h):
        """Final hidden states (..., hidden), already normalized -> scores (..., vocab) in fp32."""
        if self.output_layer is not None:                   # quantized (qwen/quant.py quantize_model)
            return self.output_layer(h).float()
        return product(h, self.output_weight).float()          # qwen/linear.py: the one product seam

    def forward(self, ids, cache=None, last=False, keep=None, pixel_values=None, grid_thw=None):
        """ids (batch, seq) or (seq,). With a cache, positions continue from cache.length (+ its rope
        delta, after an image) and every layer from what it kept. last=True: the last position's logits
        only (batch, 1, vocab). keep, a list, receives the residual stream after the embedding and each
        layer (the logit lens). pixel_values and grid_thw (qwen.vision.preprocess): the images whose
        pad tokens (one per merged token) are in ids; the tower's features replace their embeddings."""
        device = self.norm.weight.device                    # fp32 even in a quantized model
        ids = torch.as_tensor(ids, device=device)
        ids = ids[None] if ids.dim() == 1 else ids                            # (batch, seq)
        seq = ids.shape[1]
        past = 0 if cache is None else cache.length
        x = self.embed_tokens(ids)                                            # (batch, seq, hidden)
        if pixel_values is not None or grid_thw is not None:
            x, cos, sin = self._with_images(ids, x, pixel_values, grid_thw, cache)
        else:                                                                 # text: plain 1-D RoPE, shifted by
            delta = 0 if cache is None else cache.delta                       # the rope delta after an image
            cos, sin = self.rotary(torch.arange(past, past + seq, device=device) + delta)   # (seq, rotary_dim) each
        if keep is not None:
            keep.append(x)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, None if cache is None else cache[i])
            if keep is not None:
                keep.append(x)
        if cache is not None:
            cache.length += seq
        if last:
            x = x[:, -1:]                                                     # (batch, 1, hidden)
        return self.logits(self.norm(x))                                      # (batch, seq, vocab)

    def _with_images(self, ids, x, pixel_values, grid_thw, cache):
        """The image features in place of the pad tokens' embeddings, and the 3D positions' cos/sin. With a
        cache, positions start at its length + delta, and it keeps the new delta (next position - index)."""
        if pixel_values is None or grid_thw is None:
            raise QwenError("Images need both pixel_values and grid_thw (qwen.vision.preprocess gives both).",
                            "图像需要同时给出 pixel_values 和 grid_thw（qwen.vision.preprocess 两者都给）。")
        if self.visual is None:
            raise QwenError("{path} has no vision tower (model.visual.* tensors): this checkpoint cannot read "
                            "images. Use the multimodal checkpoint (Qwen/Qwen3.5-0.8B).", "{path} 没有视觉塔（model."
                            "visual.* 张量）：这个检查点读不了图像。请使用多模态检查点（Qwen/Qwen3.5-0.8B）。", path=self.path or self.cfg.source)
        grid_thw = torch.tensor(image_grids(grid_thw), dtype=torch.int64).reshape(-1, 3)   # (images, 3), checked
        past = 0 if cache is None else cache.length
        start = past + (0 if cache is None else cache.delta)
        if not isinstance(start, int):                                        # per-row deltas: one row at a time
            raise QwenError("Images after a batch with different rope deltas per row are not supported: "
                            "read images with a new cache.", "不支持在各行 rope delta 不同的批次之后再读图像："
                            "请用新的缓存读入图像。")
        positions = rope_index(ids.cpu(), grid_thw, self.cfg, start=start)    # (3, batch, seq); checks the counts
        features = self.visual(pixel_values, grid_thw)                        # (image tokens, hidden)
        slots = ids == self.cfg.image_tokens()[0]                             # (batch, seq)
        if features.shape[0] != int(slots.sum()) or features.shape[-1] != x.shape[-1]:
            raise QwenError("The vision tower gave {f} image features for {n} image pad tokens.",
                            "视觉塔给出了 {f} 个图像特征，而图像占位词元有 {n} 个。", f=tuple(features.shape), n=int(slots.sum()))
        x = x.masked_scatter(slots[..., None], features.to(x.dtype))          # (batch, seq, hidden)
        if cache is not None:
            after = positions.amax(dim=(0, 2)) + 1 - (past + ids.shape[1])    # (batch,) next position - index
            cache.delta = int(after[0]) if bool((after == after[0]).all()) else after[:, None]
        cos, sin = self.rotary(positions.to(x.device))                        # (batch, seq, rotary_dim) each
        return x, cos, sin


# ---------------------------------------------------------------------------- loading
READ_BYTES = 1 << 24                                   # converted 16 MB at a time
VISUAL = "model.visual."                               # the vision tower's keys, as stored


class _Converted:
    """A view of the lazy weights for `load()`: each tensor read with plain file reads and converted
    to one dtype as it is read (no mapping of the file, no second copy). Records what was read."""

    def __init__(self, W, dtype):
        self.W, self.dtype, self.read = W, dtype, set()
        self._buffer = torch.empty(READ_BYTES, dtype=torch.uint8)

    def __contains__(self, name):
        return name in self.W

    def __getattr__(self, name):                        # shape, names_under, ...: the lazy weights' own
        return getattr(self.W, name)

    def __getitem__(self, name):
        info = self.W.info(name)
        if name in self.read:
            raise QwenError("{name} was asked for twice while loading.", "加载时 {name} 被读取了两次。", name=name)
        self.read.add(name)
        stored = info.torch_dtype
        dtype = stored if self.dtype is None or not stored.is_floating_point else self.dtype
        if stored == dtype:                                                   # nothing to convert: the
            return self.W[name]                                               # file's pages, mapped, no copy
        out = torch.empty(info.shape, dtype=dtype)
        if info.numel == 0:
            return out
        flat = out.view(-1)
        with open(info.file, "rb", buffering=0) as f:
            f.seek(info.offset)
            raw = self._buffer.numpy()                                        # one buffer, reused
            step = len(raw) // DTYPES[info.dtype][1]
            for start in range(0, info.numel, step):
                n = min(step, info.numel - start)
                _read_exactly(f, raw[:n * DTYPES[info.dtype][1]], info)
                flat[start:start + n] = self._buffer[:len(raw)].view(stored)[:n]   # the one conversion
                if out.is_floating_point():                                   # NaN and inf: one line
                    check_finite_block(info, flat[start:start + n], start)
        self.W.finite.add(info.name)
        return out


def _read_exactly(f, array, info):
    view, done = memoryview(array), 0
    while done < len(view):
        got = f.readinto(view[done:])
        if not got:
            raise QwenError("{file} ended while reading {name}: the file is truncated. Download it again.",
                            "读取 {name} 时 {file} 提前结束：文件被截断了。请重新下载。", file=info.file, name=info.name)
        done += got


def load_model(path, dtype=torch.float32, vision=True):
    """Build Qwen3.5 from a checkpoint folder's config and fill it, strictly, from its weights. dtype: the
    compute dtype of every floating-point tensor (None: each as stored). vision=False: leave the vision
    tower unread (model.visual None), for text only: 0.8B's tower is 100 M parameters."""
    path = Path(path).expanduser()
    cfg = Config.load(path)
    W = load_weights(path)
    with torch.device("meta"):                                                # shapes only
        model = Qwen35(cfg, dtype=dtype or torch.bfloat16)
    source = _Converted(W, dtype)
    parts = [("embed_tokens", model.embed_tokens)] + [(f"layers.{i}", layer) for i, layer in enumerate(model.layers)]
    parts += [("norm", model.norm)] + ([("lm_head", model.lm_head)] if not cfg.tie_word_embeddings else [])
    for prefix, module in parts:
        load(module, source, prefix + ".")
    vcfg = VisionConfig.from_config(cfg) if vision and W.names_under(VISUAL) else None
    if vcfg is not None:                                                      # a text-only export has no tower
        with torch.device("meta"):
            model.visual = VisionModel(vcfg, out_hidden=cfg.hidden_size)
        load(model.visual, source, VISUAL)
    model.unused = sorted(n for n in set(W) - source.read if not n.startswith("mtp."))   # e.g. a rotary buffer
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if t.is_meta:
            raise QwenError("{name} was not loaded.", "{name} 没有被加载。", name=name)
    model.requires_grad_(False)
    model.path = path
    return model.eval()


def model_norms(cfg, W):
    """Every normalization of the language model, built by walking the config, loaded strictly:
    {prefix: module}, e.g. "layers.0.input_layernorm" -> RMSNorm(1024). For 0.8B: 49 on the residual
    stream (two per layer, one final), 12 per-head q/k norms, 18 gated RMSNorms (linear attention)."""
    eps, norms = cfg.rms_norm_eps, {}
    for i, kind in enumerate(cfg.layer_types):
        norms[f"layers.{i}.input_layernorm"] = RMSNorm(cfg.hidden_size, eps)
        norms[f"layers.{i}.post_attention_layernorm"] = RMSNorm(cfg.hidden_size, eps)
        if kind == "full_attention":
            norms[f"layers.{i}.self_attn.q_norm"] = RMSNorm(cfg.head_dim, eps)       # per head
            norms[f"layers.{i}.self_attn.k_norm"] = RMSNorm(cfg.head_dim, eps)
        else:
            norms[f"layers.{i}.linear_attn.norm"] = GatedRMSNorm(cfg.linear_value_head_dim, eps)
    norms["norm"] = RMSNorm(cfg.hidden_size, eps)
    return {prefix: load(module, W, prefix + ".") for prefix, module in norms.items()}
