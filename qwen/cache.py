"""The cache: what each layer keeps between calls, so a new token does not read the prompt again.

    full attention (6 of 24 layers in 0.8B)   k, v: (batch, kv_heads, seq, head_dim), grows by one
                                              position per token
    linear attention (18 of 24)                conv: the last kernel-1 conv inputs (a 3-token window)
                                              state: (batch, heads, 128, 128) fp32, fixed size

It is part of the model (the layers read and write it: qwen/attention.py, qwen/deltanet.py), so it
lives below both the model and generation (qwen/generate.py, which fills it token by token).
"""
from dataclasses import dataclass

import torch


@dataclass
class Room:
    """The buffers behind one attention layer's k and v, with room for more tokens than they hold
    (qwen/attention.py remember). k and v are the views handed out last: while the layer's cache.k
    and cache.v are still these, the next token is written into the buffers, with no copy."""
    k_buffer: torch.Tensor             # (batch, kv_heads, capacity, head_dim), capacity a multiple of ROOM
    v_buffer: torch.Tensor             # (batch, kv_heads, capacity, head_dim)
    k: torch.Tensor = None             # k_buffer[:, :, :seq]: the part in use
    v: torch.Tensor = None             # v_buffer[:, :, :seq]


class LayerCache:
    """What one layer keeps between calls. Attention uses k, v; Gated DeltaNet uses conv, state."""

    def __init__(self):
        self.k = None                  # (batch, kv_heads, seq, head_dim), after k_norm and RoPE, fp32
        self.v = None                  # (batch, kv_heads, seq, head_dim)
        self.room = None               # Room: the buffers behind k and v (qwen/attention.py remember)
        self.conv = None               # (batch, conv_channels, kernel - 1): the last conv inputs
        self.state = None              # (batch, value_heads, key_head_dim, value_head_dim), fp32

    @property
    def nbytes(self):
        """Bytes in use (the attention's buffers hold up to 256 tokens more: qwen/attention.py)."""
        return sum(t.nbytes for t in (self.k, self.v, self.conv, self.state) if t is not None)

    def __repr__(self):
        held = {n: tuple(t.shape) for n in ("k", "v", "conv", "state") if (t := getattr(self, n)) is not None}
        return f"LayerCache({held})"


class Cache:
    """One LayerCache per layer, and how many positions the model has already read."""

    def __init__(self, num_layers):
        self.layers = [LayerCache() for _ in range(num_layers)]
        self.length = 0                # tokens seen: the next token's index
        self.delta = 0                 # the next token's position minus its index: 0 for text, negative after
                                       # an image (its tokens span fewer positions: qwen/rope.py rope_index)

    def __getitem__(self, i):
        return self.layers[i]

    def __len__(self):
        return len(self.layers)

    @property
    def nbytes(self):
        return sum(layer.nbytes for layer in self.layers)

    def copy(self):
        """What the cache holds now, kept aside: this cache reads on, the copy can continue later
        from here (a chat's next turn, qwen/generate.py Chat). A Gated DeltaNet state cannot be
        rewound, so a point to come back to must be kept when the model passes it.

        No tensor is copied: the modules never change a kept tensor in place (the delta rule and
        the conv return new ones; the attention appends past the copy's length), and the copy
        takes no `room`, so continuing it writes into buffers of its own (qwen/attention.py remember)."""
        twin = Cache(0)
        twin.length, twin.delta = self.length, self.delta
        for layer in self.layers:
            kept = LayerCache()
            kept.k, kept.v, kept.conv, kept.state = layer.k, layer.v, layer.conv, layer.state
            twin.layers.append(kept)
        return twin

    def __repr__(self):
        shift = "" if isinstance(self.delta, int) and self.delta == 0 else f", rope delta {self.delta}"
        return f"Cache({len(self.layers)} layers, {self.length} tokens{shift}, {self.nbytes:,} bytes)"
