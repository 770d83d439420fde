"""Full (softmax) attention with an output gate: the attention of every 4th Qwen3.5 layer.

Why: this is where tokens read from each other. Each token makes a query; every earlier token offers
a key and a value; the token takes the values, weighted by softmax(query . key).

What Qwen3.5 adds to the textbook version (Vaswani et al., 2017), step by step:
  1. q_proj is twice as wide as the queries: per head, head_dim query rows, then head_dim output-gate
     rows: how much of each head's result the token lets through (sigmoid, 0 .. 1), before o_proj.
  2. q_norm and k_norm: a zero-centred RMSNorm over head_dim, per head, before RoPE. They fix
     the length of every query and key, so no score can grow without bound.
  3. RoPE on the first rotary_dim entries of q and k (see qwen/rope.py).
  4. Grouped-query attention (GQA): query head h reads kv head h // group (0.8B: 8 query heads, 2 kv
     heads), which shrinks the kv cache 4x; the queries lose little.
  5. scores = q . k / sqrt(head_dim), keys after the query masked (causal), softmax in fp32.

Causal blocks: queries go in blocks of `block` rows, and a block computes scores only against
the keys its last query may see; later keys are masked for the whole block, so they are skipped
(about half the work at 1024 tokens; flash attention's idea without its online softmax).
GQA without copies: the `group` query heads that share a kv head are stacked as rows of one
matrix, (group * seq, head_dim), multiplied by that kv head's keys once (no repeat_kv).

The cache (chapter 9): a qwen.cache.LayerCache; `update` appends the new keys and values (after
k_norm and RoPE, in fp32: the bf16 values exactly) and the new queries attend over all of them.
cos and sin are the new tokens' only.

Precision: the projections run in the weights' dtype, the norms' statistics in fp32; q, k and v leave
RoPE rounded to the weights' dtype, then the attention runs in fp32 and its result is rounded back once.
Why not bf16 matmuls: each number of keys is a new matmul shape, and the CPU's bf16 library (oneDNN)
keeps every shape it has seen, so memory would grow with every token.
"""
import math

import torch
import torch.nn as nn

from qwen.norm import RMSNorm, ShapeError
from qwen.rope import apply_rope
from qwen.linear import Linear


class Attention(nn.Module):
    """(batch, seq, hidden) -> (batch, seq, hidden), causal, with GQA and the output gate."""

    def __init__(self, cfg, block=128):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.group = self.heads // self.kv_heads                 # query heads per kv head
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.block = block
        hidden, inner, kv = cfg.hidden_size, self.heads * self.head_dim, self.kv_heads * self.head_dim
        self.q_proj = Linear(hidden, 2 * inner, bias=False)  # per head: query rows, then gate rows
        self.k_proj = Linear(hidden, kv, bias=False)
        self.v_proj = Linear(hidden, kv, bias=False)
        self.o_proj = Linear(inner, hidden, bias=False)
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)  # per head, over head_dim
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, cache=None):
        _check_inputs(self, x, cos, cache)
        B, T, _ = x.shape
        H, KV, D = self.heads, self.kv_heads, self.head_dim
        h = x.to(getattr(self.q_proj, "weight", x).dtype)       # matmuls in the weights' dtype (quantized: x's)
        q, gate = self.q_proj(h).view(B, T, H, 2, D).unbind(3)   # (B, T, H, D) each
        q = self.q_norm(q).transpose(1, 2)                       # (B, H, T, D)
        k = self.k_norm(self.k_proj(h).view(B, T, KV, D)).transpose(1, 2)   # (B, KV, T, D)
        v = self.v_proj(h).view(B, T, KV, D).transpose(1, 2)    # (B, KV, T, D)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        q, k, v = q.float(), k.float(), v.float()                # the attention in fp32 (see Precision)

        if cache is not None:
            k, v = cache.update(k, v)                            # (B, KV, past + T, D): all so far
        past = k.shape[2] - T                                    # keys before this call's tokens

        out = causal_attention(q, k, v, self.scale, past, self.block)
        out = out.to(h.dtype).transpose(1, 2).reshape(B, T, H * D)   # (B, T, H*D): heads side by side
        out = out * torch.sigmoid(gate.reshape(B, T, H * D))     # the output gate
        return self.o_proj(out).to(x.dtype)                      # (B, T, hidden)

    def extra_repr(self):
        return f"heads={self.heads}, kv_heads={self.kv_heads}, head_dim={self.head_dim}"


def _check_inputs(attn, x, cos, cache):
    """This module's checks of its inputs, in one place: x's width, one position per token, the cache's batch."""
    hidden = attn.q_proj.in_features
    if x.dim() != 3 or x.shape[-1] != hidden:
        shape = list(x.shape)
        raise ShapeError(f"Attention expects x of shape (batch, seq, {hidden}), got {shape}.",
                         f"Attention 需要形状为 (batch, seq, {hidden}) 的 x，实际是 {shape}。")
    if cos.shape[-2] != x.shape[1]:
        n, t = cos.shape[-2], x.shape[1]
        raise ShapeError(f"cos/sin hold {n} positions but x has {t} tokens: pass the positions of the new tokens only "
                         f"(with a cache, past + 0 .. past + {t} - 1).", f"cos/sin 有 {n} 个位置，但 x 有 {t} 个词元："
                         f"只传新词元的位置（有缓存时是 past + 0 .. past + {t} - 1）。")
    held = None if cache is None or cache.k is None else list(cache.k.shape)
    if held is not None and held[0] != x.shape[0]:
        got = [x.shape[0], attn.kv_heads, x.shape[1], attn.head_dim]
        raise ShapeError(f"The attention cache holds keys/values of shape {held} (batch, kv_heads, seq, head_dim) "
                         f"but this call's are {got}: a different batch needs a new cache (model.new_cache()).",
                         f"注意力缓存里的键/值形状是 {held} (batch, kv_heads, seq, head_dim)，"
                         f"而这次调用的是 {got}：批次不同时请用新的缓存 (model.new_cache())。")


def causal_attention(q, k, v, scale, past=0, block=128):
    """softmax(q k^T * scale, causal) v by hand, grouped-query, in blocks of query rows.

    q: (B, H, T, D); k, v: (B, KV, S, D) with S = past + T, H a multiple of KV. Query t (position
    past + t) may see keys 0 .. past + t. The softmax runs in fp32. Returns (B, H, T, D) in v's dtype."""
    B, H, T, D = q.shape
    KV, S = k.shape[1], k.shape[2]
    g = H // KV
    q = q.reshape(B, KV, g, T, D)                                # query heads grouped by kv head
    masked = torch.ones(T, S, dtype=torch.bool, device=q.device).triu_(past + 1)   # (T, S), once
    out = torch.empty(B, KV, g, T, D, dtype=v.dtype, device=v.device)
    for start in range(0, T, block):
        stop = min(start + block, T)
        n, keys = stop - start, past + stop                      # later keys are masked for all n
        rows = q[:, :, :, start:stop].reshape(B, KV, g * n, D)   # the group's rows, stacked
        scores = rows @ k[:, :, :keys].transpose(-1, -2)         # (B, KV, g*n, keys)
        scores = scores.view(B, KV, g, n, keys).mul_(scale)
        scores.masked_fill_(masked[start:stop, :keys], float("-inf"))
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(v.dtype)
        out[:, :, :, start:stop] = (weights.view(B, KV, g * n, keys) @ v[:, :, :keys]).view(B, KV, g, n, D)
    return out.view(B, H, T, D)
