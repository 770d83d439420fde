"""The cache: what each layer keeps between calls, so a new token does not read the prompt again.

    full attention (6 of 24 layers in 0.8B)   k, v: (batch, kv_heads, seq, head_dim), one more per token
    linear attention (18 of 24)                conv: the last kernel-1 conv inputs; state: (batch, heads,
                                              128, 128) fp32, fixed size

Going back (speculative decoding, chapter 12) is setting `length` lower: the next token writes
over the positions after it, as gpt-fast's KVCache does. The layers read and write it.
"""
from dataclasses import dataclass

import torch

ROOM = 256                             # the key/value buffers grow this many positions at a time


@dataclass(eq=False, repr=False)
class LayerCache:
    """What one layer keeps between calls. Attention: k_buffer, v_buffer, length; Gated DeltaNet: conv,
    state, and during a verify pass (qwen/mtp.py) `trail`, the state after every token."""
    k_buffer: torch.Tensor = None      # (batch, kv_heads, capacity, head_dim) fp32, after k_norm and RoPE
    v_buffer: torch.Tensor = None      # (batch, kv_heads, capacity, head_dim) fp32
    length: int = 0                    # positions of the buffers in use
    conv: torch.Tensor = None          # (batch, conv_channels, kernel - 1): the last conv inputs
    state: torch.Tensor = None         # (batch, value_heads, key_head_dim, value_head_dim), fp32
    trail: object = None               # a qwen.deltanet.Trail while a verify pass keeps every token's state

    @property
    def k(self):                       # the keys in use: (batch, kv_heads, length, head_dim), or None
        return None if self.k_buffer is None else self.k_buffer[:, :, :self.length]

    v = property(lambda self: None if self.v_buffer is None else self.v_buffer[:, :, :self.length])

    def update(self, k, v):
        """Write k, v (B, KV, T, D) at positions length .. length + T - 1; return all, (B, KV, length + T, D).
        New buffers when full, when autograd keeps what earlier calls read, or for buffers made under
        inference_mode written outside it (torch forbids that)."""
        start, end = self.length, self.length + k.shape[2]
        b = self.k_buffer
        if b is None or end > b.shape[2] or k.requires_grad or b.is_inference() > torch.is_inference_mode_enabled():
            self.k_buffer, self.v_buffer = _grown(self.k, k, end), _grown(self.v, v, end)
        self.k_buffer[:, :, start:end], self.v_buffer[:, :, start:end] = k, v
        self.length = end
        return self.k, self.v

    @property
    def nbytes(self):                  # bytes in use (the buffers hold up to ROOM positions more)
        return sum(t.nbytes for t in (self.k, self.v, self.conv, self.state) if t is not None)


def _grown(old, new, end):
    """A buffer with room for more than `end` positions, holding `old` (the positions in use) first."""
    buffer = new.new_empty(new.shape[0], new.shape[1], (end // ROOM + 1) * ROOM, new.shape[3])
    if old is not None:
        buffer[:, :, :old.shape[2]] = old
    return buffer


class Cache:
    """One LayerCache per layer, and how many positions the model has already read."""

    def __init__(self, num_layers):
        self.layers = [LayerCache() for _ in range(num_layers)]
        self.length = 0                # tokens seen: the next token's index
        self.delta = 0                 # the next token's position minus its index: negative after an image
        self.mtp = None                # the MTP head's own Cache during speculative decoding (qwen/mtp.py)

    def __getitem__(self, i):
        return self.layers[i]

    def __len__(self):
        return len(self.layers)

    nbytes = property(lambda self: sum(layer.nbytes for layer in self.layers))

    def copy(self):
        """What the cache holds now, kept to continue from later (a chat's next turn: a DeltaNet state
        cannot be rewound). k and v are copied (this cache writes on into its buffers); conv and state
        are shared: the layers replace them, never change them in place."""
        twin = Cache(0)
        twin.length, twin.delta = self.length, self.delta
        twin.layers = [LayerCache(*(None if t is None else t.clone() for t in (lc.k, lc.v)), lc.length, lc.conv,
                                  lc.state) for lc in self.layers]
        return twin

    def __repr__(self):
        return f"Cache({len(self.layers)} layers, {self.length} tokens, {self.nbytes:,} bytes)"
